//===- Status.cpp --------------------------------------------------------===//
#include "attnc/runtime/Status.h"

namespace attnc::rt {

std::string Status::toString() const {
  switch (code_) {
  case StatusCode::Ok: return "ok";
  case StatusCode::InvalidArgument: return "invalid argument: " + message_;
  case StatusCode::NotFound: return "not found: " + message_;
  case StatusCode::Unavailable: return "unavailable: " + message_;
  case StatusCode::Internal: return "internal error: " + message_;
  }
  return message_;
}

} // namespace attnc::rt
