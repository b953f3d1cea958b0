//===- Status.h - Errors as values for the runtime --------------*- C++ -*-===//
//
// Nothing in the runtime aborts on user input: every check returns a Status
// whose message names the argument and what was expected.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_STATUS_H
#define ATTNC_RUNTIME_STATUS_H

#include <string>
#include <utility>

namespace attnc::rt {

enum class StatusCode {
  Ok,
  InvalidArgument, // shapes, dtypes, strides, names, lengths
  NotFound,        // a missing file, kernel, variant or argument
  Unavailable,     // no CUDA driver or device
  Internal,        // a bug in attnc
};

class [[nodiscard]] Status {
public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status invalidArgument(std::string msg) {
    return Status(StatusCode::InvalidArgument, std::move(msg));
  }
  static Status notFound(std::string msg) {
    return Status(StatusCode::NotFound, std::move(msg));
  }
  static Status unavailable(std::string msg) {
    return Status(StatusCode::Unavailable, std::move(msg));
  }
  static Status internal(std::string msg) {
    return Status(StatusCode::Internal, std::move(msg));
  }

  bool isOk() const { return code_ == StatusCode::Ok; }
  explicit operator bool() const { return isOk(); }
  StatusCode code() const { return code_; }
  const std::string &message() const { return message_; }
  /// "invalid argument: <message>", or "ok".
  std::string toString() const;

private:
  Status(StatusCode c, std::string m) : code_(c), message_(std::move(m)) {}
  StatusCode code_ = StatusCode::Ok;
  std::string message_;
};

} // namespace attnc::rt

#endif
