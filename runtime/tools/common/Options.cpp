//===- Options.cpp - Parsing check/bench options --------------------------===//
#include "Options.h"

#include "attnc/runtime/Parse.h"

#include <algorithm>

#include <cstdlib>
#include <iostream>

namespace attnc::tools {

int usage(const char *command, const std::string &msg) {
  std::cerr << command << ": error: " << msg << "\nrun '" << command
            << " --help' for usage\n";
  return 2;
}


namespace {
bool toInt(const std::string &s, int64_t lo, int64_t hi, int64_t &out) {
  return rt::parseInt(s, lo, hi, out); // never clamped or wrapped
}
} // namespace

bool Options::parse(const std::vector<std::string> &args, std::string &err) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], val;
    bool hasVal = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos &&
        a.rfind("--set", 0) != 0 && a.rfind("--input", 0) != 0) {
      val = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      hasVal = true;
    }
    auto next = [&]() -> bool {
      if (hasVal)
        return true;
      if (i + 1 >= args.size()) {
        err = "option '" + a + "' needs a value";
        return false;
      }
      val = args[++i];
      return true;
    };
    auto intOpt = [&](int64_t &dst, int64_t lo, int64_t hi) -> bool {
      if (!next())
        return false;
      if (!toInt(val, lo, hi, dst)) {
        err = "option '" + a + "' expects an integer in [" + std::to_string(lo) +
              ", " + std::to_string(hi) + "], got '" + val + "'";
        return false;
      }
      return true;
    };
    int64_t tmp;
    static const char *kShapeOptions[] = {
        "--batch",  "--heads",      "--kv-heads",   "--q-len",
        "--kv-len", "--head-dim",   "--v-head-dim", "--kv-lens",
        "--q-offsets", "--kv-offsets", "--head-offset", "--head-count",
        "--dtype", "--layout", "--mode", "--pad"};
    if (std::find(std::begin(kShapeOptions), std::end(kShapeOptions), a) !=
            std::end(kShapeOptions) &&
        std::find(shapeOptions.begin(), shapeOptions.end(), a) ==
            shapeOptions.end())
      shapeOptions.push_back(a);
    if (a == "--help" || a == "-h") help = true;
    else if (a == "--suite") suite = true;
    else if (a == "--matrix") matrix = true;
    else if (a == "--checked") checked = true;
    else if (a == "--backward") backward = true;
    else if (a == "--json") json = true;
    else if (a == "--no-baseline") baseline = false;
    else if (a == "--variant") { if (!next()) return false; variant = val; }
    else if (a == "--backend") { if (!next()) return false; backend = val; }
    else if (a == "--output" || a == "-o") { if (!next()) return false; output = val; }
    else if (a == "--batch") { if (!intOpt(shape.batch, 1, 1 << 16)) return false; }
    else if (a == "--heads") { if (!intOpt(shape.heads, 1, 1024)) return false; }
    else if (a == "--kv-heads") { if (!intOpt(shape.kvHeads, 1, 1024)) return false; }
    else if (a == "--q-len") { if (!intOpt(shape.qLen, 1, 1 << 24)) return false; }
    else if (a == "--kv-len") { if (!intOpt(shape.kvLen, 0, 1 << 24)) return false; }
    else if (a == "--head-dim") { if (!intOpt(shape.headDim, 8, 256)) return false; }
    else if (a == "--v-head-dim") { if (!intOpt(shape.vHeadDim, 8, 256)) return false; }
    else if (a == "--head-offset") { if (!intOpt(shape.headOffset, 0, 1 << 24)) return false; }
    else if (a == "--head-count") { if (!intOpt(shape.headCount, 0, 1 << 24)) return false; }
    else if (a == "--kv-lens" || a == "--q-offsets" || a == "--kv-offsets") {
      if (!next())
        return false;
      bool lens = a == "--kv-lens";
      std::vector<int64_t> &list = lens                 ? shape.kvLens
                                   : a == "--q-offsets" ? shape.qOffsets
                                                        : shape.kvOffsets;
      list.clear();
      size_t start = 0;
      while (start <= val.size()) {
        size_t end = val.find(',', start);
        std::string item = val.substr(start, end == std::string::npos ? std::string::npos : end - start);
        if (!toInt(item, 0, lens ? 1 << 24 : INT32_MAX, tmp)) {
          err = a + " expects " + (lens ? "lengths" : "non-negative positions") +
                " separated by commas, got '" + val + "'";
          return false;
        }
        list.push_back(tmp);
        if (end == std::string::npos)
          break;
        start = end + 1;
      }
    } else if (a == "--seed") { if (!intOpt(tmp, 0, INT64_MAX)) return false; shape.seed = tmp; }
    else if (a == "--threads") { if (!intOpt(tmp, 0, 1024)) return false; threads = int(tmp); }
    else if (a == "--block-m") { if (!intOpt(blockM, 1, 256)) return false; }
    else if (a == "--block-n") { if (!intOpt(blockN, 8, 1024)) return false; }
    else if (a == "--warps") { if (!intOpt(warps, 1, 16)) return false; }
    else if (a == "--warmup") { if (!intOpt(tmp, 0, 100000)) return false; warmup = int(tmp); }
    else if (a == "--iters") { if (!intOpt(tmp, 1, 100000)) return false; iters = int(tmp); }
    else if (a == "--dtype") {
      if (!next()) return false;
      auto t = rt::parseDType(val);
      if (!t || (*t != rt::DType::F32 && *t != rt::DType::F16 && *t != rt::DType::BF16)) {
        err = "--dtype must be f32, f16 or bf16, got '" + val + "'";
        return false;
      }
      shape.dtype = *t;
    } else if (a == "--layout") {
      if (!next()) return false;
      std::string sorted = val;
      std::sort(sorted.begin(), sorted.end());
      if (sorted != "bdhs") {
        err = "--layout must order the letters b, h, s, d (outermost first: "
              "bhsd, bshd, sbhd, bhds, ...), got '" + val + "'";
        return false;
      }
      shape.layout = val;
    } else if (a == "--pad") {
      if (!intOpt(shape.pad, 0, 1024)) return false;
    } else if (a == "--page-size") {
      if (!intOpt(shape.pageSize, 1, 1 << 20)) return false;
    } else if (a == "--splits") {
      if (!intOpt(shape.splits, 1, 256)) return false;
    } else if (a == "--mode") {
      if (!next()) return false;
      if (val == "prefill") shape.mode = Mode::Prefill;
      else if (val == "decode") shape.mode = Mode::Decode;
      else if (val == "chunk") shape.mode = Mode::Chunk;
      else {
        err = "--mode must be prefill, decode or chunk, got '" + val + "'";
        return false;
      }
    } else if (a == "--set" || a.rfind("--set=", 0) == 0 || a == "--input" ||
               a.rfind("--input=", 0) == 0) {
      bool isSet = a.rfind("--set", 0) == 0;
      size_t eq = a.find('=');
      if (eq != std::string::npos) {
        val = a.substr(eq + 1);
        a = a.substr(0, eq);
      } else if (!next()) {
        return false;
      }
      size_t e = val.find('=');
      if (e == std::string::npos || e == 0) {
        err = a + " expects NAME=VALUE, got '" + val + "'";
        return false;
      }
      std::string name = val.substr(0, e), rhs = val.substr(e + 1);
      if (isSet) {
        double d = 0;
        if (rhs == "true" || rhs == "false") {
          d = rhs == "true"; // bool scalars
        } else if (!rt::parseFinite(rhs, d)) {
          err = "--set " + name + ": '" + rhs + "' is not a finite number";
          return false;
        }
        sets[name] = d;
      } else {
        inputs[name] = rhs;
      }
    } else if (!a.empty() && a[0] == '-' && a != "-") {
      err = "unknown option '" + a + "'";
      return false;
    } else {
      positional.push_back(args[i]);
    }
  }
  // Options that the mode would silently override are errors.
  if (shape.mode == Mode::Decode && shape.qLen > 1) {
    err = "--mode decode runs one query per sequence, but --q-len is " +
          std::to_string(shape.qLen) +
          " (use --mode chunk for several queries at the end of the keys)";
    return false;
  }
  if (matrix && suite) {
    err = "--matrix and --suite are two case lists: choose one";
    return false;
  }
  // A case list sets every shape option itself.
  if ((suite || matrix) && !shapeOptions.empty()) {
    err = shapeOptions.front() + " sets a shape, but " +
          (suite ? "--suite" : "--matrix") +
          " runs its own list of shapes (every dtype, mode and head layout): "
          "drop one of them";
    return false;
  }
  if (shape.kvHeads > 0 && shape.heads % shape.kvHeads != 0) {
    err = "--heads (" + std::to_string(shape.heads) +
          ") must be a multiple of --kv-heads (" + std::to_string(shape.kvHeads) + ")";
    return false;
  }
  return true;
}

} // namespace attnc::tools
