//! TEMPORARY while proto does not compile.
use env_core::{EnvError, Info, Kwargs, Options, Step, Value};
#[derive(Debug, Clone)]
pub struct RemoteBackend;
impl RemoteBackend {
    pub fn new(_a: &[String]) -> Result<Self, EnvError> {
        Err(EnvError::Unsupported("remote".into()))
    }
    pub fn server_count(&self) -> usize {
        1
    }
    pub(super) async fn make(
        &self,
        _e: &str,
        _k: &Kwargs,
        _r: usize,
    ) -> Result<RemoteSession, EnvError> {
        Err(EnvError::Unsupported("remote".into()))
    }
}
#[derive(Debug)]
pub struct RemoteSession;
impl RemoteSession {
    pub(super) async fn reset(
        &mut self,
        _s: Option<u64>,
        _o: &Options,
    ) -> Result<(Value, Info), EnvError> {
        Err(EnvError::Unsupported("remote".into()))
    }
    pub(super) async fn step(&mut self, _a: Value) -> Result<Step<Value>, EnvError> {
        Err(EnvError::Unsupported("remote".into()))
    }
    pub(super) async fn close(self) -> Result<(), EnvError> {
        Ok(())
    }
}
