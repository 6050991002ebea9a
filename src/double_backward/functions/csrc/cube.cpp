// y = x^3 as a C++ extension whose backward is a hand-written kernel that autograd
// cannot see. Built on first use by double_backward/functions/cpp_extension.py with
// torch.utils.cpp_extension.load. Two autograd Functions share the same two kernels:
//   CubeUntracked: its backward calls the backward kernel directly: first order only.
//   Cube:          its backward calls CubeBackward, a Function of its own with a
//                  backward in ATen ops: second, third and higher derivatives work.
#include <torch/extension.h>

namespace {

void check_kernel_input(const char* name, const torch::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), name,
              ": the kernel runs on the CPU only, got a tensor on ", t.device());
  TORCH_CHECK(t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kDouble,
              name, ": the kernel supports float32 and float64 only, got ",
              t.scalar_type());
}

}  // namespace

// The forward kernel: y = x * x * x, one element at a time.
torch::Tensor cube_kernel(const torch::Tensor& x) {
  check_kernel_input("cube_kernel", x);
  const torch::Tensor x_c = x.contiguous();
  torch::Tensor y = torch::empty_like(x_c);
  AT_DISPATCH_FLOATING_TYPES(x_c.scalar_type(), "cube_kernel", [&] {
    const scalar_t* in = x_c.data_ptr<scalar_t>();
    scalar_t* out = y.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x_c.numel(); ++i) {
      out[i] = in[i] * in[i] * in[i];
    }
  });
  return y;
}

// The backward kernel: grad_x = grad_out * 3x^2, written through raw pointers.
// Autograd records none of it: the result has no grad_fn, even with create_graph=True.
torch::Tensor cube_backward_kernel(const torch::Tensor& grad_out,
                                   const torch::Tensor& x) {
  check_kernel_input("cube_backward_kernel", grad_out);
  check_kernel_input("cube_backward_kernel", x);
  TORCH_CHECK(grad_out.scalar_type() == x.scalar_type(),
              "cube_backward_kernel: grad_out and x must have the same dtype, got ",
              grad_out.scalar_type(), " and ", x.scalar_type());
  TORCH_CHECK(grad_out.sizes() == x.sizes(),
              "cube_backward_kernel: grad_out and x must have the same shape, got ",
              grad_out.sizes(), " and ", x.sizes());
  const torch::Tensor g_c = grad_out.contiguous();
  const torch::Tensor x_c = x.contiguous();
  torch::Tensor grad_x = torch::empty_like(x_c);
  AT_DISPATCH_FLOATING_TYPES(x_c.scalar_type(), "cube_backward_kernel", [&] {
    const scalar_t* g = g_c.data_ptr<scalar_t>();
    const scalar_t* in = x_c.data_ptr<scalar_t>();
    scalar_t* out = grad_x.data_ptr<scalar_t>();
    for (int64_t i = 0; i < x_c.numel(); ++i) {
      out[i] = g[i] * (3 * (in[i] * in[i]));
    }
  });
  return grad_x;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// BROKEN for double backward, on purpose: backward calls the kernel directly, so the
// gradient it returns has no history and cannot be differentiated again.
struct CubeUntracked : public torch::autograd::Function<CubeUntracked> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return cube_kernel(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    return {cube_backward_kernel(grad_outputs[0], x)};
  }
};

// The backward kernel as a Function of its own: g = grad_out * 3x^2. Its backward
// gives dg/dgrad_out * gg = 3x^2 * gg and dg/dx * gg = 6x * grad_out * gg in ATen ops
// on the saved inputs, which autograd records under create_graph=True.
struct CubeBackward : public torch::autograd::Function<CubeBackward> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& grad_out,
                               const torch::Tensor& x) {
    ctx->save_for_backward({grad_out, x});
    return cube_backward_kernel(grad_out, x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& grad_out = saved[0];
    const torch::Tensor& x = saved[1];
    const torch::Tensor& grad_grad_x = grad_outputs[0];
    return {grad_grad_x * 3 * x.pow(2), grad_grad_x * grad_out * 6 * x};
  }
};

// y = x^3, differentiable to every order: backward calls CubeBackward::apply, which
// autograd records, instead of the kernel.
struct Cube : public torch::autograd::Function<Cube> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return cube_kernel(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    return {CubeBackward::apply(grad_outputs[0], x)};
  }
};

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("cube_kernel", &cube_kernel, "y = x^3, a loop autograd does not record");
  m.def("cube_backward_kernel", &cube_backward_kernel,
        "grad_out * 3x^2, a loop autograd does not record");
  m.def(
      "cube_untracked", [](const torch::Tensor& x) { return CubeUntracked::apply(x); },
      "y = x^3; backward calls the kernel directly: first order only");
  m.def(
      "cube", [](const torch::Tensor& x) { return Cube::apply(x); },
      "y = x^3; backward is CubeBackward: every order");
  m.def(
      "cube_backward",
      [](const torch::Tensor& grad_out, const torch::Tensor& x) {
        return CubeBackward::apply(grad_out, x);
      },
      "grad_out * 3x^2 with its own backward");
}
