// gRPC says why a TLS file was refused or a server could not start only in its own log,
// on stderr, before and apart from the one-line error poplar prints ("E1122 ...
// ssl_transport_security.cc:854] Invalid private key."). While a GrpcLogCapture lives,
// gRPC's log lines are held instead, so that the error can quote them in words:
// "... (gRPC: Invalid private key.)".
//
// Nothing is lost: lines not taken are written to stderr when the capture ends, and with
// GRPC_VERBOSITY or GRPC_TRACE set (someone debugging gRPC) every line is written at once
// as well. One capture at a time, process-wide (gRPC has one log function).
#pragma once

#include <string>

namespace poplar {

class GrpcLogCapture {
 public:
  GrpcLogCapture();   // installs the holding log function
  ~GrpcLogCapture();  // writes the lines not taken, then restores gRPC's own log
  GrpcLogCapture(const GrpcLogCapture&) = delete;
  GrpcLogCapture& operator=(const GrpcLogCapture&) = delete;

  // The messages held so far, oldest first, without the source location gRPC appends to
  // its statuses, joined by "; " ("" if none); they are not written at the end.
  std::string Take();
};

}  // namespace poplar
