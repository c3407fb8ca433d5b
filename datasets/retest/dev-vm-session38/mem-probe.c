/* Session 38: a plain memory-read probe. ./mem-probe MIB RUNS: RUNS times, write a
   512 MiB buffer (to evict the caches), then time one thread summing a MIB-MiB
   buffer; prints the median in microseconds. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  size_t mb=atoi(argv[1]); size_t n=mb*1024*1024/8; int runs=atoi(argv[2]);
  uint64_t *a=malloc(n*8), *e=malloc((size_t)512*1024*1024);
  memset(a,1,n*8); memset(e,2,(size_t)512*1024*1024);
  double best=1e18, ts[64]; uint64_t s=0;
  for(int r=0;r<runs;r++){
    memset(e,r,(size_t)512*1024*1024); /* evict */
    double t=now(); for(size_t i=0;i<n;i+=8) s+=a[i]+a[i+1]+a[i+2]+a[i+3]+a[i+4]+a[i+5]+a[i+6]+a[i+7]; ts[r]=now()-t;
  }
  /* median */
  for(int i=0;i<runs;i++)for(int j=i+1;j<runs;j++)if(ts[j]<ts[i]){double x=ts[i];ts[i]=ts[j];ts[j]=x;}
  printf("%.0f %lu\n",ts[runs/2],(unsigned long)(s&1));
}
