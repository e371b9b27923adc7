# tests/trainer.mk: Check suites of the trainer (layers, data, CLI, training).
