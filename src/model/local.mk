# src/model/: the U-Net, its layers, optimizers and mixed precision -> libmodel.a. Everything it
# runs goes through the ops table and the device interface of src/device/.
noinst_LIBRARIES += libmodel.a
libmodel_a_SOURCES = \
	src/model/model.h \
	src/model/unet.c src/model/unet.h src/model/unet_impl.h src/model/unet_build.c \
	src/model/layers.c src/model/layers.h \
	src/model/conv_engine.c src/model/conv_engine.h \
	src/model/rng.c src/model/rng.h \
	src/model/optim.c src/model/optim_config.c src/model/optim.h \
	src/model/amp.c src/model/amp.h
