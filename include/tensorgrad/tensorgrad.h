// tensorgrad: define, train and run neural networks natively in C++.
// Include this one header; see README.md for a ten-minute tour.
#pragma once
#include "tensorgrad/bert.h"
#include "tensorgrad/chat.h"
#include "tensorgrad/checkpoint.h"
#include "tensorgrad/distributed.h"
#include "tensorgrad/dtype.h"
#include "tensorgrad/errors.h"
#include "tensorgrad/functional.h"
#include "tensorgrad/module.h"
#include "tensorgrad/nn.h"
#include "tensorgrad/optim.h"
#include "tensorgrad/pretrained.h"
#include "tensorgrad/generate.h"
#include "tensorgrad/mamba.h"
#include "tensorgrad/program.h"
#include "tensorgrad/tensor.h"
#include "tensorgrad/tokenizer.h"
