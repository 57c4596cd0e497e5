#include "runtime/model/plain_module.hpp"

#include <torch/torch.h>

#include <stdexcept>

namespace actorpipe {

torch::nn::Sequential plain_sequential(const std::vector<layer>& layers) {
  torch::nn::Sequential net;
  for (const auto& l : layers) {
    const auto& s = l.spec();
    if (s.type == "linear") {
      torch::nn::Linear m(s.in, s.out);
      torch::NoGradGuard no_grad;
      for (auto& [name, t] : l.parameters()) m->named_parameters()[name].copy_(t);
      net->push_back(m);
    } else if (s.type == "relu") {
      net->push_back(torch::nn::ReLU());
    } else if (s.type == "tanh") {
      net->push_back(torch::nn::Tanh());
    } else if (s.type == "gelu") {
      net->push_back(torch::nn::GELU());
    } else if (s.type == "dropout") {
      net->push_back(torch::nn::Dropout(s.p));
    } else {
      throw std::invalid_argument("plain module: no torch module for layer type '" + s.type + "'");
    }
  }
  return net;
}

}  // namespace actorpipe
