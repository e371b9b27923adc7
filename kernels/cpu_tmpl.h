/* cpu_tmpl.h — instantiates a CPU reference template twice, for f32 and f64: the includer
 * defines CPU_TMPL (the template header, written in terms of the element type T and the name
 * suffix SFX) and includes this file once. The same source gives the backend's f32 ops and the
 * f64 ones the tests check gradients with. */
#ifndef CPU_TMPL
#error "define CPU_TMPL (the template header) before including kernels/cpu_tmpl.h"
#endif

#define T float
#define SFX f32
#include CPU_TMPL
#undef T
#undef SFX

#define T double
#define SFX f64
#include CPU_TMPL
#undef T
#undef SFX

#undef CPU_TMPL
