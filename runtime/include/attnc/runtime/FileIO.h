//===- FileIO.h - Writing output files safely ------------------*- C++ -*-===//
//
// Outputs are written whole or not at all: into a temporary file beside the
// destination, flushed and closed with every error checked, then renamed
// over it, so a failed write never destroys an existing file. Destinations
// that are not regular files (/dev/stdout, /dev/null, a pipe) are written
// in place, errors checked all the same.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_FILEIO_H
#define ATTNC_RUNTIME_FILEIO_H

#include "attnc/runtime/Status.h"

#include <string>
#include <string_view>

namespace attnc::rt {

/// Replaces `path` with `bytes`. Errors say "cannot write 'PATH': why".
Status writeFileAtomic(const std::string &path, std::string_view bytes);

/// Reads a whole regular file of at most `maxBytes` bytes (named pipes,
/// devices and larger files are refused).
Status readFileLimited(const std::string &path, size_t maxBytes,
                       std::string &out);

/// Reads up to `n` bytes from `fd` into `buf`, retrying interrupted and
/// short reads; returns how many were read (fewer at end of file or on an
/// error).
size_t readFully(int fd, char *buf, size_t n);

} // namespace attnc::rt

#endif
