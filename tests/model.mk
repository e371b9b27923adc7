# tests/model.mk: Check suites of the model, ops and optimizers.
