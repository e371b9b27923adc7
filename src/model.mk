# src/model.mk: the model (U-Net, layers, arena/ledger, optimizers, AMP) -> libmodel.a
