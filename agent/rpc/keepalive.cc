#include "agent/rpc/keepalive.h"

#include <grpc/grpc.h>

namespace poplar {
namespace {

int Milliseconds(std::chrono::milliseconds duration) { return static_cast<int>(duration.count()); }

}  // namespace

grpc::ChannelArguments HeadChannelArguments() {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(kKeepaliveInterval));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Milliseconds(kKeepaliveTimeout));
  arguments.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  arguments.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // no cap on a quiet stream
  return arguments;
}

void AddAgentKeepalive(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, Milliseconds(kKeepaliveInterval));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, Milliseconds(kKeepaliveTimeout));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
  // Accept the head's pings at its interval; gRPC's default (one per 5 minutes without
  // data) would answer them with GOAWAY "too_many_pings".
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             Milliseconds(kKeepaliveInterval / 2));
}

}  // namespace poplar
