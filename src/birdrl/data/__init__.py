"""Stage datasets and task synthesis."""
