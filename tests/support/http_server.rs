//! Support for the HTTP facade tests (`http.rs`, `http_submit.rs`): a real server with both
//! listeners (gRPC and HTTP, each on 127.0.0.1:0) in this process, over the binary's registry and
//! sandbox (`codegym::registry_and_sandbox`). Included with `#[path]`, like `rollout_util.rs`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;

use codegym::http::{HttpListener, HttpOptions};
use codegym::server::ServerConfig;
use tokio::sync::oneshot;

/// A server with both listeners, stopped on drop.
pub struct HttpServer {
    /// The HTTP listener's address.
    pub http: SocketAddr,
    _stop: oneshot::Sender<()>,
}

impl HttpServer {
    /// Starts the server with `config` for its sessions and `options` for its HTTP facades.
    pub async fn start(config: ServerConfig, options: HttpOptions) -> HttpServer {
        Self::start_with(Default::default(), config, options).await
    }

    /// [`HttpServer::start`] with `coding` as the coding env's configuration (its sandbox limits).
    pub async fn start_with(
        coding: env_coding::CodingConfig,
        config: ServerConfig,
        options: HttpOptions,
    ) -> HttpServer {
        let (registry, sandbox) =
            tokio::task::spawn_blocking(|| codegym::registry_and_sandbox(coding))
                .await
                .unwrap()
                .expect("registry with the coding env");
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = http.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let listener = HttpListener {
            listener: http,
            sandbox,
            options,
        };
        tokio::spawn(codegym::listeners::serve_with_http(
            Arc::new(registry),
            config,
            grpc,
            Some(listener),
            async {
                let _ = rx.await;
            },
        ));
        HttpServer {
            http: addr,
            _stop: tx,
        }
    }
}
