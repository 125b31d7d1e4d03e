// Keepalive between the head node and the agents (gRPC HTTP/2 pings).
//
// Each side pings the other every kKeepaliveInterval, also while a stream is quiet (a
// long profile, a job between metrics), and drops a connection whose peer has not
// answered within kKeepaliveTimeout more. A node that freezes, or is cut off without a
// reset, thereby ends the head's streams with an error within about 20 s instead of
// never, and the agent stops a job whose head went silent in the same time.
#pragma once

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/channel_arguments.h>

#include <chrono>

namespace poplar {

constexpr std::chrono::milliseconds kKeepaliveInterval{10000};
constexpr std::chrono::milliseconds kKeepaliveTimeout{10000};

// For the head's channel to an agent.
grpc::ChannelArguments HeadChannelArguments();
// For the agent's server: pings to the head, and the head's pings accepted at this rate.
void AddAgentKeepalive(grpc::ServerBuilder& builder);

}  // namespace poplar
