"""End-to-end jobs run by ``dpjax run <task>``."""

TASKS = {
    "isrl-mnist": "dpjax.tasks.isrl_mnist",
}
