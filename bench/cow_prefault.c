// What a copy-on-write fault costs in a forked child, taken one write at a time (each a page
// fault) against all at once in the kernel (`madvise(MADV_POPULATE_WRITE)`, Linux 5.14+): if the
// fault's entry and exit were the cost, a fork server's child could copy the pages it is known to
// write in one call. Prints microseconds per copied page, averaged over REPS forks of a parent
// whose PAGES anonymous pages are all present.
//
//   cc -O2 -o target/cow_prefault bench/cow_prefault.c
//   for i in 1 2; do target/cow_prefault 500 0 50; target/cow_prefault 500 1 50; done  # PAGES MODE REPS
//
// MODE 0: one write per page; 1: MADV_POPULATE_WRITE over the range, then the same writes.
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static double now(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  if(argc<4){fprintf(stderr,"usage: %s PAGES MODE REPS\n",argv[0]);return 2;}
  int pages=atoi(argv[1]); int mode=atoi(argv[2]); int reps=atoi(argv[3]);
  size_t len=(size_t)pages*4096;
  char*p=mmap(0,len,PROT_READ|PROT_WRITE,MAP_PRIVATE|MAP_ANONYMOUS,-1,0);
  memset(p,1,len);
  double tot=0;
  for(int r=0;r<reps;r++){
    int fd[2]; pipe(fd);
    pid_t c=fork();
    if(c==0){
      double t0=now();
      if(mode==1) madvise(p,len,MADV_POPULATE_WRITE);
      for(size_t i=0;i<len;i+=4096) p[i]++;
      double t1=now();
      write(fd[1],&t1,sizeof t1); write(fd[1],&t0,sizeof t0);
      _exit(0);
    }
    double t0,t1; read(fd[0],&t1,8); read(fd[0],&t0,8); waitpid(c,0,0); close(fd[0]); close(fd[1]);
    tot+=t1-t0;
  }
  printf("mode %d pages %d: %.2f us per page\n",mode,pages,tot/reps/pages);
}
