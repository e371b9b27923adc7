/* sm90_regs.h — the registers of the Hopper convolutions' warp-specialised blocks
 * (kernels/conv_sm90*.cu). A kernel launched with __launch_bounds__(threads, 1) gets at most
 * 64 K / threads registers a thread, in steps of 8, and its block holds the kernel's count times
 * its threads from the launch on. setmaxnreg then moves registers between warpgroups: the loader
 * and prologue warps give some back, the consumers take them. An increase waits until the
 * block's free registers can meet it, so the counts after this hand-over must fit in what the
 * block holds, or the consumers wait forever. One definition for the kernels' compile-time
 * checks, their host side's check of the loaded kernel and the CPU test
 * (tests/check_conv_sm90_tile.c). C and C++. */
#ifndef KERNELS_SM90_REGS_H
#define KERNELS_SM90_REGS_H

/* The registers a block of `threads` holds when the kernel uses all that the bound allows. */
#define SM90_BLOCK_REGS(threads) (65536 / (threads) / 8 * 8 * (threads))

/* 1 when a kernel built with num_regs registers a thread (what the runtime reports) holds, in a
 * block of `threads`, the `need` registers its warpgroups take after the hand-over. */
static inline int sm90_regs_fit(int num_regs, int threads, int need)
{
  return (long)num_regs * threads >= (long)need;
}

#endif
