#include "agent/rpc/grpc_log.h"

#include <grpc/support/log.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <vector>

namespace poplar {
namespace {

struct HeldLine {
  std::string file;
  int line;
  gpr_log_severity severity;
  std::string message;
};

std::mutex held_mutex;
std::vector<HeldLine> held;  // guarded by held_mutex
bool echo = false;           // set before the log function is installed

// gRPC's own layout, near enough to read alike: "E grpc_file.cc:854] message".
void Write(const HeldLine& line) {
  const char* letter = line.severity == GPR_LOG_SEVERITY_ERROR  ? "E"
                       : line.severity == GPR_LOG_SEVERITY_INFO ? "I"
                                                                : "D";
  std::fprintf(stderr, "%s %s:%d] %s\n", letter, line.file.c_str(), line.line, line.message.c_str());
}

void Hold(gpr_log_func_args* args) {
  std::string file = args->file ? args->file : "";
  if (const auto slash = file.rfind('/'); slash != std::string::npos) file = file.substr(slash + 1);
  HeldLine line{file, args->line, args->severity, args->message ? args->message : ""};
  if (echo) Write(line);
  std::lock_guard<std::mutex> lock(held_mutex);
  held.push_back(std::move(line));
}

}  // namespace

GrpcLogCapture::GrpcLogCapture() {
  echo = std::getenv("GRPC_VERBOSITY") != nullptr || std::getenv("GRPC_TRACE") != nullptr;
  gpr_set_log_function(Hold);
}

GrpcLogCapture::~GrpcLogCapture() {
  gpr_set_log_function(nullptr);  // gRPC's default
  std::lock_guard<std::mutex> lock(held_mutex);
  if (!echo) {
    for (const HeldLine& line : held) Write(line);
  }
  held.clear();
}

std::string GrpcLogCapture::Take() {
  std::lock_guard<std::mutex> lock(held_mutex);
  std::string text;
  for (const HeldLine& line : held) {
    // gRPC's statuses trail a mapping of where they were made: "... {file:..., created_time:...}" ...
    std::string message = line.message.substr(0, line.message.find(" {"));
    while (!message.empty() && (message.back() == '\n' || message.back() == ' ' || message.back() == '.')) {
      message.pop_back();
    }
    // ... and lead with their code: "UNKNOWN:Unable to create secure server".
    if (const auto colon = message.find(':');
        colon != std::string::npos && colon > 0 && message.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") == colon) {
      message = message.substr(colon + 1);
    }
    if (!message.empty()) text += (text.empty() ? "" : "; ") + message;
  }
  held.clear();
  return text;
}

}  // namespace poplar
