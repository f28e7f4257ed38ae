// decode microbench: qdot T=1 on (out x in) of a type, GB/s; 1 and N threads
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "common/half.h"
#include "kernels/qdot.h"
#include "kernels/quant.h"
#include "kernels/thread_pool.h"
#include "kernels/matmul.h"
using namespace kvzip;
using kernels::quant::GgmlType;
static double now(){return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();}
int main(int argc,char**argv){
  GgmlType t = GgmlType::Q4_0; std::string name = argc>1?argv[1]:"Q4_0";
  for (uint32_t id=0;id<40;++id) if (auto* tr=kernels::quant::type_traits(id); tr && name==tr->name) t=GgmlType(id);
  uint32_t out = argc>2?atoi(argv[2]):14336, in = argc>3?atoi(argv[3]):4096, thr = argc>4?atoi(argv[4]):1;
  int reps = argc>5?atoi(argv[5]):30;
  const size_t rb = kernels::quant::row_bytes(t,in);
  std::vector<uint8_t> w(rb*out); uint32_t s=1;
  for(auto&x:w) x=uint8_t((s=s*1664525u+1013904223u)>>24);
  const auto& tr = kernels::quant::traits(t);
  for(size_t k=0;k<w.size()/tr.block_bytes;++k){uint8_t*b=w.data()+k*tr.block_bytes; uint16_t h=f32_to_f16(1e-3f);
    if(t==GgmlType::Q6_K){b[208]=h;b[209]=h>>8;} else {b[0]=h;b[1]=h>>8; if(t==GgmlType::Q4_1||t==GgmlType::Q5_1||t==GgmlType::Q4_K||t==GgmlType::Q5_K){b[2]=h;b[3]=h>>8;}}}
  std::vector<float> x(in), y(out);
  for(uint32_t i=0;i<in;++i) x[i]=std::sin(0.01f*i);
  kernels::ThreadPool pool(thr);
  const kernels::MatrixView v{t,w.data(),rb,out,in,nullptr};
  const kernels::MatmulArgs a{x.data(),v,nullptr,y.data(),1};
  auto isa = kernels::qisa_best();
  if (const char* e = getenv("ISA")) { if(!strcmp(e,"scalar")) isa = kernels::QIsa::Scalar; }
  double best=1e9;
  for(int r=0;r<reps;++r){double t0=now(); kernels::cpu::qdot(&pool,std::span<const kernels::MatmulArgs>(&a,1),isa); best=std::min(best,now()-t0);}
  double cs=0; for(float f:y) cs+=f;
  printf("%s %ux%u thr %u: %.3f ms  %.2f GB/s  checksum %.6g\n",name.c_str(),out,in,thr,best*1e3,w.size()/best*1e-9,cs);
}
