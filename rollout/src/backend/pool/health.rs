//! Health of the pool's servers by the standard `grpc.health.v1` protocol (what `codegym serve`,
//! Kubernetes probes and grpc-health-probe speak): a `Check` of the `codegym.v1.EnvService`
//! service, with a deadline. SERVING makes a server eligible for new sessions; NOT_SERVING (a
//! draining server), an unknown service, an error or no answer in time make it ineligible until a
//! later check says SERVING again. Sessions already open are not moved: they end on their own.
//! The answers are recorded on the servers ([`Health`] is the placement's, which reads it).

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use super::placement::{Health, Server};

/// The service whose status the pool asks for.
pub(crate) const SERVICE: &str = "codegym.v1.EnvService";

/// Asks one server.
pub(crate) async fn check(server: &Server, deadline: Duration) -> Health {
    let mut client = HealthClient::new(server.channel.clone());
    let request = HealthCheckRequest {
        service: SERVICE.to_string(),
    };
    match tokio::time::timeout(deadline, client.check(request)).await {
        Ok(Ok(response)) => match response.into_inner().status() {
            ServingStatus::Serving => Health::Serving,
            _ => Health::NotServing,
        },
        Ok(Err(status)) if status.code() == tonic::Code::NotFound => Health::NotServing,
        Ok(Err(status)) => {
            tracing::debug!(server = %server.addr, %status, "health check failed");
            Health::Down
        }
        Err(_) => {
            tracing::debug!(server = %server.addr, ?deadline, "health check timed out");
            Health::Down
        }
    }
}

/// Checks every server at once and records the answers.
pub(crate) async fn check_all(servers: &[Arc<Server>], deadline: Duration) {
    let answers = join_all(servers.iter().map(|s| check(s, deadline))).await;
    for (server, health) in servers.iter().zip(answers) {
        server.set_health(health);
    }
}
