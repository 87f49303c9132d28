"""End-to-end jobs run by ``dpjax run <task>``."""
