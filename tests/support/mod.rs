//! Test support: a real `EnvService` on 127.0.0.1:0 with a real tonic client, and small test envs.
#![allow(dead_code)] // each test binary uses a different part of the support code

pub mod envs;
pub mod raw_grpc;

use std::sync::Arc;

use codegym::server::{self, ServerConfig};
use env_core::Registry;
use proto::v1::env_service_client::EnvServiceClient;
use tokio::sync::oneshot;
use tonic::transport::Channel;

/// A server running in this process, stopped by `shutdown` or on drop.
pub struct TestServer {
    pub addr: std::net::SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    pub handle: tokio::task::JoinHandle<Result<(), server::ServeError>>,
}

impl TestServer {
    pub async fn start(registry: Registry, config: ServerConfig) -> TestServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("local addr");
        let (tx, rx) = oneshot::channel();
        let handle = tokio::spawn(server::serve(Arc::new(registry), config, listener, async {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            shutdown: Some(tx),
            handle,
        }
    }

    pub async fn client(&self) -> EnvServiceClient<Channel> {
        EnvServiceClient::new(self.channel().await)
    }

    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("uri")
            .connect()
            .await
            .expect("connect to test server")
    }

    /// Starts the graceful shutdown; await `handle` to see it finish.
    pub fn begin_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The registry with CartPole and the test envs (no coding env: those have their own tests).
pub fn test_registry() -> Registry {
    // The server's own offload, so blocking test envs run where production ones would.
    let mut registry = codegym::empty_registry();
    env_core::register_classic(&mut registry).expect("register classic");
    envs::register(&mut registry);
    registry
}

/// An `Evaluate` item's step and its `info` as JSON; panics on an item error.
pub fn evaluated(r: &proto::v1::EvaluateResult) -> (&proto::v1::StepResponse, serde_json::Value) {
    let step = r
        .step
        .as_ref()
        .unwrap_or_else(|| panic!("item error: {r:?}"));
    let info = serde_json::from_str(&step.info_json).expect("info is JSON");
    (step, info)
}
