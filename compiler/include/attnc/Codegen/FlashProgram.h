//===- FlashProgram.h - The tiled flash-attention program ------*- C++ -*-===//
//
// Turns a variant and a kernel configuration into one function over work
// items (b, h, Q tile): loops over only the non-empty KV tiles, QK^T x
// scale, score_mod on every visited tile, mask_mod only on partial tiles
// and sequence tails, x log2(e), exp2 online softmax with fp32 running max
// and sum, P.V, and an epilogue writing O and the natural-log LSE. The
// calling convention is runtime/include/attnc/runtime/KernelABI.h.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_FLASHPROGRAM_H
#define ATTNC_CODEGEN_FLASHPROGRAM_H

#include "attnc/Analysis/MaskAnalysis.h"
#include "attnc/runtime/Attention.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/IR/BuiltinOps.h"

namespace attnc {

struct FlashConfig {
  rt::KernelSpec spec;
  int64_t vectorWidth = 8; // f32 lanes of the target's SIMD registers
};

/// Adds `@<name>` (the kernel) and, for data-dependent masks,
/// `@<name>_block_mask` (the block-mask builder) to `module`.
mlir::LogicalResult buildFlashProgram(mlir::ModuleOp module,
                                      mlir::attn::VariantOp variant,
                                      const MaskAnalysis &mask,
                                      const FlashConfig &config,
                                      llvm::StringRef name);

/// The backward pass on the CPU (CpuBackwardKernel.cpp): adds
/// `@<name>_bwd_kv` (dK, dV and the parameters' gradients, per KV tile),
/// `@<name>_bwd_q` (dQ, per Q tile) and, for data-dependent masks,
/// `@<name>_block_mask` to `module`. The variant needs its score_grad
/// region (runAttnPipeline builds it).
mlir::LogicalResult buildBackwardProgram(mlir::ModuleOp module,
                                         mlir::attn::VariantOp variant,
                                         const MaskAnalysis &mask,
                                         const FlashConfig &config,
                                         llvm::StringRef name);

/// Whether the GPU kernel for `spec` is the tensor-core form (f16/bf16,
/// head dims multiples of 16 up to 128, block_m = 16 x warps x m-tiles per
/// warp with 1 or 2 m-tiles, block_n a multiple of 16): mma.sync m16n8k16
/// with f32 accumulation, ldmatrix operands, Q, K and V through dynamic
/// shared memory with cp.async, two stages. Otherwise the SIMT form below.
bool useTensorCores(const rt::KernelSpec &spec);

/// The tensor-core form's threads and shared-memory layout for a spec.
/// Offsets and pitches are in elements of the input dtype (2 bytes). Stage
/// s holds K rows at s * stageElems and V rows after them; shared rows are
/// XOR-swizzled by 16-byte chunk (conflict-free ldmatrix and cp.async)
/// where the row has 2, 4 or a multiple of 8 chunks, else padded by one
/// chunk.
struct TensorCoreLayout {
  int64_t warps = 0, mTiles = 0, stages = 2;
  /// Q fragments loaded once per work item and held in registers; else
  /// re-read from shared memory for every KV tile (fewer registers).
  bool qInRegisters = true;
  int64_t ldQ = 0, ldK = 0, ldV = 0;
  bool swizzleQ = false, swizzleK = false, swizzleV = false;
  int64_t stageElems = 0, qOffset = 0, totalElems = 0;
  int64_t sharedBytes() const { return totalElems * 2; }
};
TensorCoreLayout tensorCoreLayout(const rt::KernelSpec &spec);

/// One iteration of the tensor-core form's loop over KV tiles: the MMAs of
/// QK^T and PV per warp, and the 16-byte cp.async of the K and V prefetch
/// per thread (TensorCoreKernel.cpp).
rt::TileWork tensorCoreTileWork(const rt::KernelSpec &spec);

/// The SIMT GPU form of the same program, added to `module` as the kernel
/// `@<name>`: one block of blockM threads per work item (b, h, Q tile), one
/// thread per query row, K^T and V tiles staged in shared memory; modifiers,
/// mask classes, online softmax and epilogue as in the CPU form. The
/// operands are those of KernelABI.h, the last one being the first work
/// item of the launch (blockIdx.x adds to it). Data-dependent masks also get
/// `@<name>_block_mask`: one block per (b, h, Q tile) item, its threads
/// striding over the KV tiles (operands ip, fp, classes, captures, first
/// item).
mlir::LogicalResult buildGpuFlashProgram(mlir::gpu::GPUModuleOp module,
                                         mlir::attn::VariantOp variant,
                                         const MaskAnalysis &mask,
                                         const FlashConfig &config,
                                         llvm::StringRef name);

/// Whether the GPU backward of a forward spec runs on tensor cores: f16 or
/// bf16, head dims multiples of 16 up to 256, and warps >= 0 (a negative
/// warps asks for the SIMT form, as in the forward).
bool useTensorCoreBackward(const rt::KernelSpec &spec);

/// The tiles of the GPU backward for a forward spec (blockM = blockN).
/// Tensor cores: 64, 32 or 16 rows, the most whose four element tiles fit
/// 48 KiB of static shared memory, and warps = rows / 16. SIMT: 32 where
/// Q and dO rows (or K and V rows) of that many fit 48 KiB of f32, else
/// 16, and warps 0 (or the forward spec's negative value).
rt::KernelSpec gpuBackwardSpec(const rt::KernelSpec &spec);

/// Threads and static shared memory per block of the two backward kernels
/// for a gpuBackwardSpec.
struct GpuBackwardLaunch {
  int64_t queryThreads = 0, keyValueThreads = 0;
  int64_t querySharedBytes = 0, keyValueSharedBytes = 0;
};
GpuBackwardLaunch gpuBackwardLaunch(const rt::KernelSpec &backwardSpec);

/// One iteration of the tensor-core backward's tile loops on a full tile:
/// _bwd_q per visited KV tile (S, dP, dQ += dX K), _bwd_kv per visited Q
/// tile (S^T, dP^T, dV, dK, and score_grad's atomic adds per pair); their
/// copies are element-wise (no cp.async). Unstated for the SIMT form, and
/// for _bwd_kv when score_grad accumulates inside a sum (a count that
/// depends on data). (TensorCoreBackwardKernel.cpp)
std::pair<rt::TileWork, rt::TileWork>
tensorCoreBackwardTileWork(mlir::attn::VariantOp variant,
                           const rt::KernelSpec &backwardSpec);

/// The GPU backward pass (SIMT: GpuBackwardKernel.cpp; tensor cores, when
/// config.spec.warps > 0: TensorCoreBackwardKernel.cpp):
/// `@<name>_bwd_q` (delta and dQ: one block per (b, head, Q tile), a thread
/// per query row), `@<name>_bwd_kv` (dK, dV and, by atomic adds, the float
/// parameters' gradients: one block per (b, KV head, KV tile), a thread per
/// key) and, for data-dependent masks, `@<name>_block_mask`. `config.spec`
/// is gpuBackwardSpec's. The variant needs its score_grad region.
mlir::LogicalResult buildGpuBackwardProgram(mlir::gpu::GPUModuleOp module,
                                            mlir::attn::VariantOp variant,
                                            const MaskAnalysis &mask,
                                            const FlashConfig &config,
                                            llvm::StringRef name);

} // namespace attnc

#endif
