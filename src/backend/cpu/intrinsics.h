// The x86 intrinsics, for the CPU kernels that use them (included after their other includes).
// GCC 12's _mm512_undefined_* self-initialise (`__m512 __Y = __Y;`), which -Wuninitialized and
// -Wmaybe-uninitialized report wherever an intrinsic using them is inlined (GCC bug 105593, fixed
// in 13): those two warnings are off in the files that include this.
#pragma once
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
