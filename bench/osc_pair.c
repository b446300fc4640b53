/* osc_pair.c: one origin (rank 0) and one target (rank 1, waiting in MPI_Barrier) on an
 * MPI_Win_create window, for counting the origin's instructions per operation with
 * callgrind across two processes (valgrind on rank 0 only, toggled on the MPI calls) and
 * for a mean time per operation. LOOP: put, get, acc, fop, cas (each followed by
 * MPI_Win_flush inside one MPI_Win_lock epoch), putbw (64 puts, one flush), or any of them
 * with "lock" appended (each operation in its own MPI_Win_lock/_unlock epoch), flushlocal and
 * getflushlocal (a put or a get, each followed by MPI_Win_flush_local), putall, getall... (each
 * operation in its own MPI_Win_lock_all/_unlock_all epoch: OSU's -s lock_all).
 *   mpirun -n 2 osc_pair ITERATIONS LOOP [BYTES]   (bench/RESULTS.md, osc-create-osu) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc,char**argv){MPI_Init(&argc,&argv);int rank;MPI_Comm_rank(MPI_COMM_WORLD,&rank);
long n=atol(argv[1]);const char*l=argv[2];int sz=argc>3?atoi(argv[3]):8;
char*mem=calloc(1<<20,1);static char buf[1<<20],res[1<<20];long long one=1,r=0,c=0;MPI_Win win;
MPI_Win_create(mem,1<<20,1,MPI_INFO_NULL,MPI_COMM_WORLD,&win);
if(rank==0){int fl=strstr(l,"flushlocal")!=0;if(!strcmp(l,"flushlocal"))l="put";
 int all=strstr(l,"all")!=0,lock=!fl&&!all&&strstr(l,"lock")!=0; if(!lock&&!all)MPI_Win_lock(MPI_LOCK_SHARED,1,0,win);
 double t0=MPI_Wtime();
 for(long i=0;i<n;i++){ if(lock)MPI_Win_lock(MPI_LOCK_SHARED,1,0,win); if(all)MPI_Win_lock_all(0,win);
  if(!strncmp(l,"putbw",5)){for(int j=0;j<64;j++)MPI_Put(buf,sz,MPI_CHAR,1,0,sz,MPI_CHAR,win);}
  else if(!strncmp(l,"put",3))MPI_Put(buf,sz,MPI_CHAR,1,0,sz,MPI_CHAR,win);
  else if(!strncmp(l,"get",3))MPI_Get(res,sz,MPI_CHAR,1,0,sz,MPI_CHAR,win);
  else if(!strncmp(l,"acc",3))MPI_Accumulate(buf,sz,MPI_CHAR,1,0,sz,MPI_CHAR,MPI_SUM,win);
  else if(!strncmp(l,"fop",3))MPI_Fetch_and_op(&one,&r,MPI_LONG_LONG,1,0,MPI_SUM,win);
  else if(!strncmp(l,"cas",3))MPI_Compare_and_swap(&one,&c,&r,MPI_LONG_LONG,1,0,win);
  if(lock)MPI_Win_unlock(1,win); else if(all)MPI_Win_unlock_all(win); else if(fl)MPI_Win_flush_local(1,win); else MPI_Win_flush(1,win);}
 double t=MPI_Wtime()-t0; if(!lock&&!all)MPI_Win_unlock(1,win); printf("%s %d: %.3f us\n",argv[2],sz,t/n*1e6);}
MPI_Barrier(MPI_COMM_WORLD);MPI_Win_free(&win);MPI_Finalize();}
