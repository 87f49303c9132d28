"""Helpers shared by the reproduction tests."""


def missing_labels(text: str) -> list[str]:
    """The labels of the three numbers of a shuffled run (``dpjax.reproduce.shuffle_report``) that ``text`` (a report)
    lacks: a shuffled run's report never shows one number alone."""
    from dpjax.accounting.shuffle_gap import LABELS

    return [label for label in LABELS.values() if label not in text]
