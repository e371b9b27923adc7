# collectives/cuda.mk: the device transport (CUDA IPC/P2P collectives), CUDA build only.
