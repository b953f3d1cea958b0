//===- Streams.h - Work queued on streams, run at synchronization --------===//
//
// The emulator orders work as CUDA does, so that code which relies on an
// ordering it never asked for fails here as it would on a device. Kernel
// launches and asynchronous copies are queued on their stream and run only
// when something waits for them: cuStreamSynchronize, cuCtxSynchronize,
// cuEventSynchronize, or a synchronous call. With the legacy default
// stream, the null stream and every blocking stream form one queue, which
// a synchronous copy or memset waits for; a non-blocking stream
// (CU_STREAM_NON_BLOCKING) has its own queue that nothing but its own
// synchronization (or cuCtxSynchronize, cuMemFree, cuModuleUnload) runs.
// A fault of a queued kernel is returned by the call that ran it.
//
// Stream capture (CUDA graphs): while a created stream captures, its
// launches and event records go into a graph instead of its queue, and a
// graph launch queues copies of them. As in CUDA's global capture mode,
// whatever would synchronize, allocate or free, and any copy on the
// capturing stream (the runtime's host memory is pageable), fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, so
// code that is not graph-safe fails here as on a device.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_EMU_STREAMS_H
#define ATTNC_EMU_STREAMS_H

#include "Launch.h"

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace attnc::emu {

/// A created stream (cuStreamCreate); the null stream is no object.
struct Stream {
  bool nonBlocking = false;
};

struct Event {
  std::chrono::steady_clock::time_point t;
  bool recorded = false;
};

struct Graph;

class Streams {
public:
  static Streams &get();

  /// Queues a launch; the parameters are copied now, as cuLaunchKernel does.
  /// `programmatic`: it may overlap the launch ahead of it (PDL;
  /// GridDependency.h says what is checked).
  void launch(void *stream, const Kernel &k, const LaunchShape &s,
              void **params, bool programmatic = false);
  /// Queues a host-to-device copy (the host bytes are copied now); 0, or
  /// an error on a capturing stream.
  int copyToDevice(void *stream, uint64_t dst, const void *src, size_t n);
  /// Queues a device-to-host copy (the host buffer must stay valid).
  int copyToHost(void *stream, void *dst, uint64_t src, size_t n);
  void record(void *stream, Event *e);

  /// Runs the queue of `stream` (the legacy queue for the null stream and
  /// blocking streams); returns the first fault (a CUDA error), or 0.
  int sync(void *stream);
  /// Runs every queue.
  int syncAll();
  /// A created stream goes (cuStreamDestroy, after its work ran): its
  /// queue and what its last launch wrote with it, so that a stream
  /// created at the same address starts afresh.
  void forget(void *stream);

  /// Capture: begins on a created stream (not the null stream); ends with
  /// the graph, or CUDA_ERROR_STREAM_CAPTURE_INVALIDATED.
  int beginCapture(void *stream);
  int endCapture(void *stream, Graph **out);
  /// Queues the graph's work on `stream`.
  int launchGraph(void *stream, const Graph &g);
  /// 0 when no stream captures; else invalidates the captures, reports
  /// `what` and returns CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
  int refuseDuringCapture(const std::string &what);

  struct Work {
    enum Kind { Launch, ToDevice, ToHost, Record } kind;
    const Kernel *kernel = nullptr;
    LaunchShape shape;
    bool programmatic = false;
    std::vector<uint8_t> bytes; // launch parameters, or host data
    uint64_t dev = 0;
    void *host = nullptr;
    size_t n = 0;
    Event *event = nullptr;
  };

private:
  std::deque<Work> &queueOf(void *stream);
  /// Queues `w`, or adds it to the stream's capture; 0 or an error.
  int enqueue(void *stream, Work w);
  int run(std::deque<Work> &q);

  std::recursive_mutex mu_;
  int pending_ = 0; // a fault of work run eagerly (ATTNC_EMU_SYNC)
  std::deque<Work> legacy_;
  std::map<void *, std::deque<Work>> nonBlocking_;
  struct Capture {
    std::vector<Work> work;
    bool invalid = false;
  };
  std::map<void *, Capture> capturing_;
  /// Per queue, what its last launch wrote, where a programmatic launch
  /// may follow it (recorded when one is queued behind it, or always with
  /// ATTNC_EMU_SYNC, which runs each launch before the next is queued).
  std::map<const std::deque<Work> *, GridWrites> ahead_;
};

/// A captured graph (also its executable form: instantiation copies it).
struct Graph {
  std::vector<Streams::Work> work;
};

} // namespace attnc::emu

#endif
