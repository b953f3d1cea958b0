//===- Streams.cpp - Work queued on streams, run at synchronization ------===//
#include "Streams.h"
#include "DeviceMemory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace attnc::emu {

void reportFault(const std::string &what); // Driver.cpp

namespace {
// CUDA_ERROR_ILLEGAL_STATE, _STREAM_CAPTURE_UNSUPPORTED, _INVALIDATED
constexpr int kIllegalState = 401, kCaptureUnsupported = 900,
              kCaptureInvalidated = 901;
} // namespace

Streams &Streams::get() {
  static Streams s; // destroyed when the library is unloaded
  return s;
}

std::deque<Streams::Work> &Streams::queueOf(void *stream) {
  // The null stream, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2), and
  // every blocking stream share the legacy queue.
  auto *s = reinterpret_cast<uintptr_t>(stream) > 2 ? static_cast<Stream *>(stream)
                                                      : nullptr;
  if (s && s->nonBlocking)
    return nonBlocking_[stream];
  return legacy_;
}

int Streams::enqueue(void *stream, Work w) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (auto c = capturing_.find(stream); c != capturing_.end()) {
    if (w.kind == Work::ToDevice || w.kind == Work::ToHost) {
      c->second.invalid = true;
      reportFault("a copy between host and device on a capturing stream "
                  "(pageable host memory cannot be captured)");
      return kCaptureUnsupported;
    }
    c->second.work.push_back(std::move(w));
    return 0;
  }
  queueOf(stream).push_back(std::move(w));
  // ATTNC_EMU_SYNC=1: run everything at once (debugging).
  if (const char *v = std::getenv("ATTNC_EMU_SYNC"); v && *v == '1')
    if (int r = run(queueOf(stream)); r && !pending_)
      pending_ = r;
  return 0;
}

int Streams::refuseDuringCapture(const std::string &what) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (capturing_.empty())
    return 0;
  for (auto &[s, c] : capturing_)
    c.invalid = true;
  reportFault(what + " while a stream is capturing a graph");
  return kCaptureUnsupported;
}

int Streams::beginCapture(void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (reinterpret_cast<uintptr_t>(stream) <= 2) {
    reportFault("cuStreamBeginCapture on the null stream");
    return kCaptureUnsupported;
  }
  if (capturing_.count(stream))
    return kIllegalState;
  capturing_[stream] = Capture();
  return 0;
}

int Streams::endCapture(void *stream, Graph **out) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto c = capturing_.find(stream);
  if (c == capturing_.end())
    return kIllegalState;
  Capture cap = std::move(c->second);
  capturing_.erase(c);
  *out = nullptr;
  if (cap.invalid)
    return kCaptureInvalidated;
  *out = new Graph{std::move(cap.work)};
  return 0;
}

int Streams::launchGraph(void *stream, const Graph &g) {
  for (const Work &w : g.work)
    if (int r = enqueue(stream, w))
      return r;
  return 0;
}

void Streams::launch(void *stream, const Kernel &k, const LaunchShape &s,
                     void **params, bool programmatic) {
  Work w;
  w.kind = Work::Launch;
  w.kernel = &k;
  w.shape = s;
  w.programmatic = programmatic;
  w.bytes.assign(k.paramBytes + 8, 0);
  for (size_t i = 0; i < k.params.size(); ++i)
    std::memcpy(w.bytes.data() + k.params[i].offset, params[i], k.params[i].size);
  enqueue(stream, std::move(w));
}

int Streams::copyToDevice(void *stream, uint64_t dst, const void *src, size_t n) {
  Work w;
  w.kind = Work::ToDevice;
  w.dev = dst;
  w.bytes.assign(static_cast<const uint8_t *>(src), static_cast<const uint8_t *>(src) + n);
  w.n = n;
  return enqueue(stream, std::move(w));
}

int Streams::copyToHost(void *stream, void *dst, uint64_t src, size_t n) {
  Work w;
  w.kind = Work::ToHost;
  w.host = dst;
  w.dev = src;
  w.n = n;
  return enqueue(stream, std::move(w));
}

void Streams::record(void *stream, Event *e) {
  Work w;
  w.kind = Work::Record;
  w.event = e;
  enqueue(stream, std::move(w));
}

int Streams::run(std::deque<Work> &q) {
  int first = 0;
  const char *sync = std::getenv("ATTNC_EMU_SYNC");
  const bool eager = sync && *sync == '1';
  auto at = ahead_.find(&q);
  while (!q.empty()) {
    Work w = std::move(q.front());
    q.pop_front();
    if (w.kind != Work::Launch && at != ahead_.end()) {
      // Only a kernel right behind a kernel overlaps it.
      ahead_.erase(at);
      at = ahead_.end();
    }
    switch (w.kind) {
    case Work::Launch: {
      std::vector<void *> ptrs;
      for (const ParamSlot &p : w.kernel->params)
        ptrs.push_back(w.bytes.data() + p.offset);
      MemoryMap mem = DeviceMemory::get().snapshot();
      std::string what;
      GridWrites writes;
      GridDependencyChecks grid;
      if (w.programmatic && at != ahead_.end())
        grid.prerequisite = &at->second;
      if (eager || (!q.empty() && q.front().kind == Work::Launch &&
                    q.front().programmatic))
        grid.record = &writes;
      int r = emu::launch(*w.kernel, w.shape, ptrs.data(), mem,
                          launchOptionsFromEnv(), what, grid);
      if (r) {
        reportFault(what);
        first = first ? first : r;
      }
      if (grid.record)
        at = ahead_.insert_or_assign(&q, std::move(writes)).first;
      else if (at != ahead_.end()) {
        ahead_.erase(at);
        at = ahead_.end();
      }
      break;
    }
    case Work::ToDevice:
      std::memcpy(reinterpret_cast<void *>(w.dev), w.bytes.data(), w.n);
      break;
    case Work::ToHost:
      std::memcpy(w.host, reinterpret_cast<void *>(w.dev), w.n);
      break;
    case Work::Record:
      w.event->t = std::chrono::steady_clock::now();
      w.event->recorded = true;
      break;
    }
  }
  return first;
}

int Streams::sync(void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (int r = refuseDuringCapture("a synchronization"))
    return r;
  int r = run(queueOf(stream));
  r = r ? r : pending_;
  pending_ = 0;
  return r;
}

void Streams::forget(void *stream) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  auto it = nonBlocking_.find(stream);
  if (it == nonBlocking_.end())
    return;
  ahead_.erase(&it->second);
  nonBlocking_.erase(it);
}

int Streams::syncAll() {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (int r = refuseDuringCapture("a synchronization"))
    return r;
  int r = run(legacy_);
  for (auto &[s, q] : nonBlocking_) {
    int e = run(q);
    r = r ? r : e;
  }
  r = r ? r : pending_;
  pending_ = 0;
  return r;
}

} // namespace attnc::emu
