//! The remote backend: sessions on `codegym serve` instances over gRPC (codegym.v1 unary calls).
//!
//! Channels are created lazily and shared (HTTP/2 multiplexes every episode's calls over one
//! connection per server); an episode stays on the server that made its session.

use env_core::{EnvError, Info, Kwargs, Options, Step, Value};
use proto::convert;
use proto::v1;
use proto::v1::env_service_client::EnvServiceClient;
use tonic::transport::{Channel, Endpoint};

/// A set of `codegym serve` addresses.
#[derive(Debug, Clone)]
pub struct RemoteBackend {
    servers: Vec<(String, EnvServiceClient<Channel>)>,
}

impl RemoteBackend {
    /// Prepares clients for `http://host:port` addresses; connections open on first use.
    pub fn new(addresses: &[String]) -> Result<Self, EnvError> {
        if addresses.is_empty() {
            return Err(EnvError::InvalidKwargs("no env server address".into()));
        }
        let servers = addresses
            .iter()
            .map(|a| {
                let endpoint = Endpoint::from_shared(a.clone())
                    .map_err(|e| {
                        EnvError::InvalidKwargs(format!("bad env server address {a:?}: {e}"))
                    })?
                    .tcp_nodelay(true);
                Ok((a.clone(), EnvServiceClient::new(endpoint.connect_lazy())))
            })
            .collect::<Result<Vec<_>, EnvError>>()?;
        Ok(RemoteBackend { servers })
    }

    /// Number of servers.
    pub fn server_count(&self) -> usize {
        self.servers.len()
    }

    pub(super) async fn make(
        &self,
        env_id: &str,
        kwargs: &Kwargs,
        route: usize,
    ) -> Result<RemoteSession, EnvError> {
        let (address, client) = &self.servers[route % self.servers.len()];
        let mut client = client.clone();
        let response = client
            .make(v1::MakeRequest {
                env_id: env_id.to_string(),
                kwargs_json: convert::json_text(kwargs),
            })
            .await
            .map_err(status_error)?
            .into_inner();
        Ok(RemoteSession {
            address: address.clone(),
            client,
            session_id: response.session_id,
        })
    }
}

/// A session on one server.
pub struct RemoteSession {
    address: String,
    client: EnvServiceClient<Channel>,
    session_id: String,
}

impl std::fmt::Debug for RemoteSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}#{}", self.address, self.session_id)
    }
}

impl RemoteSession {
    pub(super) async fn reset(
        &mut self,
        seed: Option<u64>,
        options: &Options,
    ) -> Result<(Value, Info), EnvError> {
        let response = self
            .client
            .reset(v1::ResetRequest {
                session_id: self.session_id.clone(),
                seed,
                options_json: convert::json_text(options),
            })
            .await
            .map_err(status_error)?
            .into_inner();
        convert::reset_from_proto(response)
            .map_err(|e| EnvError::Infrastructure(format!("bad reset response: {e}")))
    }

    pub(super) async fn step(&mut self, action: Value) -> Result<Step<Value>, EnvError> {
        let response = self
            .client
            .step(v1::StepRequest {
                session_id: self.session_id.clone(),
                action: Some(convert::value_to_proto(&action)),
            })
            .await
            .map_err(status_error)?
            .into_inner();
        convert::step_from_proto(response)
            .map_err(|e| EnvError::Infrastructure(format!("bad step response: {e}")))
    }

    pub(super) async fn close(mut self) -> Result<(), EnvError> {
        self.client
            .close(v1::CloseRequest {
                session_id: self.session_id.clone(),
            })
            .await
            .map_err(status_error)?;
        Ok(())
    }
}

/// Maps a gRPC status back onto an env error: a rejected action stays the model's fault (the episode
/// shows it to the model); everything else is a failure of the machinery, re-run on `--resume`.
fn status_error(s: tonic::Status) -> EnvError {
    let m = s.message().to_string();
    match s.code() {
        tonic::Code::InvalidArgument => EnvError::InvalidAction(m),
        tonic::Code::ResourceExhausted => EnvError::ResourceExhausted(m),
        code => EnvError::Infrastructure(format!("env server answered {code:?}: {m}")),
    }
}
