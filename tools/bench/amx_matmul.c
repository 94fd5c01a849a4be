/* Q8_0 matrix product, AVX-512 tier against the AMX tier: 3584 x 896 weight rows (random codes, f16 scales) times
 * 64 tokens, one thread, three rounds; prints GMAC/s of each and whether the outputs are bit-identical (they must
 * be: the AMX tiles keep the AVX-512 tier's f32 order). Not part of the build:
 *   gcc -O2 -std=c11 -D_GNU_SOURCE -Ikernels/cpu tools/bench/amx_matmul.c build/kernels/cpu/libsy_kernels_cpu.a -lmvec \
 *       -lm -lpthread -o /tmp/amx_matmul && /tmp/amx_matmul */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "sy_kernels.h"
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(void){ /* exits 1 where AMX is unavailable */
  size_t rows=896*4, k=896, nb=64; size_t rb=k/32*34;
  uint8_t *W=malloc(rows*rb); for(size_t i=0;i<rows*rb;i++) W[i]=rand();
  for(size_t r=0;r<rows;r++) for(size_t j=0;j<k/32;j++){uint16_t h=sy_f32_to_f16(0.01f*(rand()%100-50));memcpy(W+r*rb+j*34,&h,2);}
  float *X=malloc(nb*k*4); for(size_t i=0;i<nb*k;i++) X[i]=(rand()%1000-500)*0.001f;
  void *QX=aligned_alloc(64,(sy_quantize_x_bytes(k,nb)+63)/64*64); sy_quantize_x(X,nb,k,k,QX);
  float *Y1=malloc(nb*rows*4),*Y2=malloc(nb*rows*4);
  printf("amx: %s\n", sy_cpu_tier_unavailable_reason(SY_CPU_TIER_AMX)?sy_cpu_tier_unavailable_reason(SY_CPU_TIER_AMX):"supported");
  const sy_kernels *a=sy_kernels_for_tier(SY_CPU_TIER_AVX512),*m=sy_kernels_for_tier(SY_CPU_TIER_AMX);
  if(a==NULL||m==NULL) return 1;
  for(int it=0;it<3;it++){
  double t0=now(); a->matmul_qx(SY_DTYPE_Q8_0,W,rb,0,rows,k,QX,nb,Y1,rows); double t1=now();
  m->matmul_qx(SY_DTYPE_Q8_0,W,rb,0,rows,k,QX,nb,Y2,rows); double t2=now();
  printf("avx512 %.2f GMAC/s  amx %.2f GMAC/s  identical=%d\n", rows*k*nb/(t1-t0)/1e9, rows*k*nb/(t2-t1)/1e9, memcmp(Y1,Y2,nb*rows*4)==0);}
}
