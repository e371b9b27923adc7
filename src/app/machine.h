/* machine.h — the machine probe: what the trainer's defaults depend on (GPUs this process may
 * use, CUDA and MPI in this build, CPUs, an MPI launcher), found without initialising CUDA. */
#ifndef SRC_APP_MACHINE_H
#define SRC_APP_MACHINE_H

/* What the defaults depend on: the machine. Filled by train_machine_probe(); tests fake it. */
typedef struct {
  int visible_gpus;   /* GPUs this process may use (after CUDA_VISIBLE_DEVICES) */
  int cuda_built;     /* this binary has the CUDA backend */
  int online_cpus;
  int mpi_ranks;      /* started by mpirun (or another MPI launcher): its number of processes;
                         0: not under MPI */
  char mpi_bad[96];   /* "NAME=value" of a launcher's variable that is no number of processes
                         (then mpi_ranks is 0); "" when none */
  int mpi_built;      /* this binary can run across machines over MPI (--with-mpi) */
} train_machine_t;

/* Count GPUs without initialising CUDA (a CUDA context does not survive fork): the entries of
 * proc_dir (normally /proc/driver/nvidia/gpus), else the /dev/nvidiaN nodes in dev_dir, then
 * limited by cuda_visible (the CUDA_VISIBLE_DEVICES value, or NULL when unset). */
int train_count_gpus(const char *proc_dir, const char *dev_dir, const char *cuda_visible);
void train_machine_probe(train_machine_t *machine);

#endif
