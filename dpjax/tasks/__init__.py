"""End-to-end jobs run by ``dpjax run <task>``."""

TASKS = {"isrl-mnist-trial": "dpjax.tasks.isrl_mnist"}
