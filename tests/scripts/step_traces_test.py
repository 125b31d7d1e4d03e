#!/usr/bin/env python3
"""scripts/gpu/step_traces.py: kernels put into kinds as their names say (names of the
kernels libtorch, cuBLAS, flash attention and NCCL launch), and traces compared like
with like."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "gpu"))
import step_traces  # noqa: E402

KERNELS = {
    "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 64, 4, false, false, "
    "cutlass::bfloat16_t, Flash_kernel_traits<64, 128, 64, 4, cutlass::bfloat16_t> >, false, true>"
    "(pytorch_flash::Flash_fwd_params)": "attention",
    "fmha_cutlassB_bf16_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
    "cutlass::arch::Sm80, cutlass::bfloat16_t, true, false, true, 64, 64, 64, false>::Params)": "attention",
    # cuDNN's attention on an H200, forward and backward with its helpers.
    "cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0":
        "attention",
    "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void const*, void const*, void*, void*, "
    "unsigned int, ...)": "attention",
    "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*, unsigned int, unsigned int, ...)":
        "attention",
    "nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT": "matmul",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off"
    "_kernel__5x_cublas": "matmul",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor<float, 4, "
    "(at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, bool, float*, "
    "float*>(...)": "optimizer",
    "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, (at::native::NormType)1, "
    "float, float>, float*, int>(...)": "gradient norm",
    "void dot_kernel<float, 128, 0, cublasDotParams<cublasGemvTensorStridedBatched<float const>, "
    "cublasGemvTensorStridedBatched<float> > >(cublasDotParams<...>)": "gradient norm",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
    "Memcpy DtoD (Device -> Device)": "copy",
    "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
    "::{lambda()#3}::operator()() const::{lambda(c10::BFloat16)#1}, ...>(...)": "copy",
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(...)":
        "norm, softmax, loss",
    "void at::native::(anonymous namespace)::GammaBetaBackwardCUDAKernel_32x32<c10::BFloat16, float>(...)":
        "norm, softmax, loss",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
    "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)":
        "norm, softmax, loss",
    "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(...)::{lambda()#1}, "
    "at::detail::Array<char*, 2> >(int, ...)": "elementwise",
    "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<c10::BFloat16, at::native::func_wrapper_t<"
    "c10::BFloat16, at::native::sum_functor<...> >, unsigned int, c10::BFloat16, 4> >(...)": "elementwise",
    "void at::native::index_elementwise_kernel<128, 4, ...>(...)": "elementwise",
    "void at::native::embedding_backward_feature_kernel<c10::BFloat16, float, long>(...)": "other",
}


def trace(events, step_s=0.1):
    device = sum(1 for e in events if e["on"] != "cpu")
    return {"step": 4, "step_s": step_s, "device_events": device, "events": events}


def event(name, on, seconds, count=1):
    return {"name": name, "on": on, "count": count, "total_s": seconds}


class KindsOfKernels(unittest.TestCase):
    def test_each_kernel_gets_the_kind_its_name_says(self):
        for name, kind in KERNELS.items():
            with self.subTest(name=name[:60]):
                self.assertEqual(step_traces.kind_of(name), kind)

    def test_a_summary_adds_kernels_by_kind_and_leaves_host_operators_out(self):
        summary = step_traces.summary(trace([
            event("aten::mm", "cpu", 0.050),
            event("nvjet_tst_192x192_64x4_2x1_v_bz_coopB_TNT", "cuda", 0.030, 24),
            event("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_kernel", "cuda", 0.010, 12),
            event("Memcpy DtoD (Device -> Device)", "cuda", 0.002, 3)]))
        self.assertAlmostEqual(summary["device_s"], 0.042)
        self.assertAlmostEqual(summary["kinds_s"]["matmul"], 0.040)
        self.assertAlmostEqual(summary["kinds_s"]["copy"], 0.002)
        self.assertEqual(summary["kernels"], 39)
        self.assertNotIn("aten::mm", [e["name"] for e in summary["top"]])


class Differences(unittest.TestCase):
    def test_kernels_are_set_against_kernels_largest_difference_first(self):
        a = trace([event("k1", "cuda", 0.010), event("k2", "cuda", 0.003), event("aten::mm", "cpu", 0.5)])
        b = trace([event("k1", "cuda", 0.004), event("k2", "cuda", 0.004), event("aten::mm", "cpu", 0.1)])
        rows = step_traces.differences(a, b)
        self.assertEqual([r["name"] for r in rows], ["k1", "k2"])
        self.assertAlmostEqual(rows[0]["a_s"] - rows[0]["b_s"], 0.006)

    def test_without_kernels_on_one_side_host_operators_are_set_against_host_operators(self):
        a = trace([event("k1", "cuda", 0.010), event("aten::mm", "cpu", 0.5)])
        b = trace([event("aten::mm", "cpu", 0.1), event("aten::add", "cpu", 0.01)])
        self.assertEqual({r["name"] for r in step_traces.differences(a, b)}, {"aten::mm", "aten::add"})


if __name__ == "__main__":
    unittest.main()
