// The mlp_sin model, shared by the example and its benchmark: 1→64→64→1 with ReLU.
#pragma once
#include <tensorgrad/tensorgrad.h>

struct SinMlp : tg::Module {
  tg::nn::Linear l1{*this, "l1", 1, 64}, l2{*this, "l2", 64, 64}, l3{*this, "l3", 64, 1};
  tg::Tensor operator()(const tg::Tensor& x) const { return l3(tg::relu(l2(tg::relu(l1(x))))); }
};
