// Reference kernels of the window ops (conv2d, max_pool2d, avg_pool2d and their gradients):
// direct loops in double over ops.def's definitions. The three conv ops walk one set of
// (x, w, y) index triples, each accumulating into a different one of the three.
#include <cmath>
#include <limits>

#include "backend/ref/ref_nn.h"
#include "ir/window.h"
#include "tensorgrad/errors.h"

namespace tg::backend::ref {
namespace {

using ir::Op;
using ir::WindowGeom;

/// fn(xi, wi, yi) for every term x[xi]·w[wi] of every output y[yi] of conv2d (positions that
/// fall in the padding have no term).
template <class F>
void conv_terms(const WindowGeom& g, F&& fn) {
  const ir::Window& w = g.win;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o) {
      const int64_t group = o / g.og();
      for (int64_t i = 0; i < g.oh; ++i)
        for (int64_t j = 0; j < g.ow; ++j) {
          const int64_t yi = ((n * g.o + o) * g.oh + i) * g.ow + j;
          for (int64_t c = 0; c < g.cg(); ++c)
            for (int64_t a = 0; a < w.kh; ++a)
              for (int64_t b = 0; b < w.kw; ++b) {
                const int64_t ih = i * w.sh - w.ph + a * w.dh, iw = j * w.sw - w.pw + b * w.dw;
                if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
                const int64_t xi = ((n * g.c + group * g.cg() + c) * g.h + ih) * g.w + iw;
                const int64_t wi = ((o * g.cg() + c) * w.kh + a) * w.kw + b;
                fn(xi, wi, yi);
              }
        }
    }
}

/// fn(yi, xi, inside) for every window position of every pooled output y[yi]; xi is only
/// meaningful when `inside` (the position is not padding).
template <class F>
void pool_terms(const WindowGeom& g, F&& fn) {
  const ir::Window& w = g.win;
  for (int64_t nc = 0; nc < g.n * g.c; ++nc)
    for (int64_t i = 0; i < g.oh; ++i)
      for (int64_t j = 0; j < g.ow; ++j) {
        const int64_t yi = (nc * g.oh + i) * g.ow + j;
        for (int64_t a = 0; a < w.kh; ++a)
          for (int64_t b = 0; b < w.kw; ++b) {
            const int64_t ih = i * w.sh - w.ph + a * w.dh, iw = j * w.sw - w.pw + b * w.dw;
            const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
            fn(yi, inside ? (nc * g.h + ih) * g.w + iw : -1, inside);
          }
      }
}

/// avg_pool2d's divisor of output yi: kh·kw, or its positions inside the input.
std::vector<double> avg_divisors(const WindowGeom& g) {
  std::vector<double> d(static_cast<size_t>(g.n * g.c * g.oh * g.ow), 0.0);
  pool_terms(g, [&](int64_t yi, int64_t, bool inside) {
    if (inside || g.win.count_pad) d[static_cast<size_t>(yi)] += 1.0;
  });
  return d;
}

}  // namespace

Values compute_window(const ir::Node& node, const std::vector<const ir::Node*>& in_nodes,
                      const std::vector<const Values*>& in) {
  const WindowGeom g =
      ir::window_geom(node, in_nodes[0]->shape, in_nodes.size() > 1 ? in_nodes[1]->shape : Shape{});
  Values out(static_cast<size_t>(node.numel()), 0.0);
  auto at = [](const Values& v, int64_t i) { return v[static_cast<size_t>(i)]; };
  auto acc = [&](int64_t i) -> double& { return out[static_cast<size_t>(i)]; };
  const Values& a = *in[0];
  switch (node.op) {
    case Op::kConv2d:
      conv_terms(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc(yi) += at(a, xi) * at(*in[1], wi); });
      break;
    case Op::kConv2dGradInput:  // (dy, w)
      conv_terms(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc(xi) += at(a, yi) * at(*in[1], wi); });
      break;
    case Op::kConv2dGradWeight:  // (x, dy)
      conv_terms(g, [&](int64_t xi, int64_t wi, int64_t yi) { acc(wi) += at(a, xi) * at(*in[1], yi); });
      break;
    case Op::kMaxPool2d:
    case Op::kMaxPool2dGrad: {
      // The first maximum of each window (a NaN counts as the largest), as its position in x.
      std::vector<int64_t> arg(static_cast<size_t>(g.n * g.c * g.oh * g.ow), -1);
      pool_terms(g, [&](int64_t yi, int64_t xi, bool inside) {
        if (!inside) return;
        int64_t& best = arg[static_cast<size_t>(yi)];
        const double v = at(a, xi);
        if (best < 0 || (!std::isnan(at(a, best)) && (std::isnan(v) || v > at(a, best)))) best = xi;
      });
      for (size_t yi = 0; yi < arg.size(); ++yi) {
        if (node.op == Op::kMaxPool2d)
          out[yi] = at(a, arg[yi]);
        else
          acc(arg[yi]) += (*in[1])[yi];
      }
      break;
    }
    case Op::kAvgPool2d:
    case Op::kAvgPool2dGrad: {
      const std::vector<double> div = avg_divisors(g);
      pool_terms(g, [&](int64_t yi, int64_t xi, bool inside) {
        if (!inside) return;
        const double share = 1.0 / div[static_cast<size_t>(yi)];
        if (node.op == Op::kAvgPool2d)
          acc(yi) += at(a, xi) * share;
        else
          acc(xi) += at(a, yi) * share;
      });
      break;
    }
    default: throw Error(std::string("[ref] ") + ir::op_name(node.op) + " is not a window op");
  }
  return out;
}

}  // namespace tg::backend::ref
