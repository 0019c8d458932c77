// Precision's names (kiln/train/model.h): what train.precision and train.grad_reduce accept.
#include <string>

#include <kiln/train/model.h>

namespace kiln::train {

std::string_view precision_name(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

Result<Precision> parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  return Status::invalid_argument("'" + std::string(name) + "' is not a precision: fp32 or bf16");
}

}  // namespace kiln::train
