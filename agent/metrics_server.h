// The agent's Prometheus endpoint: GET /metrics on the agent file's `metrics` address
// answers with what `text` returns (agent/prometheus.h), over plain HTTP (civetweb, from
// Debian's libcivetweb-dev). Everything else is 404. The endpoint carries no secret and
// takes no request that changes anything; a bare port in the agent file keeps it on
// loopback. `text` runs on civetweb's threads, so it must be safe to call from them.
#pragma once

#include <functional>
#include <string>

struct mg_context;
struct mg_connection;

namespace poplar {

class MetricsServer {
 public:
  // Listens on `listen` (host:port) from here on. Throws InputError naming `file` and
  // `metrics` when it cannot (the address in use, not this machine's).
  MetricsServer(const std::string& listen, std::function<std::string()> text, const std::string& file);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

 private:
  static int Serve(mg_connection* connection, void* self);

  std::function<std::string()> text_;
  mg_context* context_ = nullptr;
};

}  // namespace poplar
