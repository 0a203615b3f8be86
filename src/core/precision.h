/* The compute precision of a run (config key `precision`, once resolved).
 * Apart from src/core/half.h so that headers seen by CUDA C++ (graph.h) can
 * name it without the C-only rounding loops. */
#ifndef ST_CORE_PRECISION_H
#define ST_CORE_PRECISION_H

typedef enum st_precision { ST_PREC_FP32 = 0, ST_PREC_BF16, ST_PREC_FP16 } st_precision;

#endif
