/* The one place that includes CBLAS (OpenBLAS, OpenMP flavour: see INFRA notes
 * on why the pthread flavour oversubscribes the cores when mixed with OpenMP). */
#ifndef ST_CORE_BLAS_H
#define ST_CORE_BLAS_H

#include <cblas.h>

#endif
