#include "agent/metrics_server.h"

#include <civetweb.h>

#include <mutex>
#include <utility>
#include <vector>

#include "planner/base/input_error.h"

namespace poplar {
namespace {

// What civetweb says while starting (why it cannot bind), for the refusal.
std::mutex log_mutex;
std::string* start_log = nullptr;

int LogMessage(const mg_connection*, const char* message) {
  std::lock_guard<std::mutex> lock(log_mutex);
  if (start_log != nullptr && message != nullptr) *start_log += (start_log->empty() ? "" : "; ") + std::string(message);
  return 1;  // not to stderr
}

}  // namespace

MetricsServer::MetricsServer(const std::string& listen, std::function<std::string()> text, const std::string& file)
    : text_(std::move(text)) {
  mg_init_library(0);
  const std::vector<const char*> options = {"listening_ports", listen.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = LogMessage;
  std::string log;
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    start_log = &log;
  }
  context_ = mg_start(&callbacks, this, const_cast<const char**>(options.data()));
  {
    std::lock_guard<std::mutex> lock(log_mutex);
    start_log = nullptr;
  }
  if (context_ == nullptr) {
    mg_exit_library();
    throw InputError(file, "metrics",
                     "cannot serve metrics on " + listen + " (in use, or not an address of this machine" +
                         (log.empty() ? "" : ": " + log) + ")");
  }
  mg_set_request_handler(context_, "/metrics$", &MetricsServer::Serve, this);
}

MetricsServer::~MetricsServer() {
  mg_stop(context_);
  mg_exit_library();
}

int MetricsServer::Serve(mg_connection* connection, void* self) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || std::string(request->request_method) != "GET") {
    mg_send_http_error(connection, 405, "%s", "only GET /metrics");
    return 405;
  }
  const std::string body = static_cast<MetricsServer*>(self)->text_();
  mg_printf(connection,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: %zu\r\n"
            "Connection: close\r\n\r\n",
            body.size());
  mg_write(connection, body.data(), body.size());
  return 200;
}

}  // namespace poplar
