//! Token-level data of one model call, as the serving engine returned it.

use serde::{Deserialize, Serialize};

/// Token-level data returned by the server. Never computed locally: ids and logprobs here come from
/// the server that sampled the tokens, so they are consistent with each other.
///
/// `completion_token_ids` has one id per sampled completion token (as counted in `usage`), in
/// order. `completion_tokens`, `completion_token_bytes` and `logprobs` have one entry per entry of
/// the server's `logprobs.content[]`: one per token too with OpenAI and vLLM, but llama.cpp sends a
/// single entry (with the logprob of the last token) for the tokens that together make one UTF-8
/// character, so there it can have fewer entries than ids.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TokenData {
    /// Where `prompt_token_ids` / `completion_token_ids` came from, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids_source: Option<TokenSource>,
    /// Where `logprobs` came from, when present.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs_source: Option<TokenSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_ids: Option<Vec<u32>>,
    /// Token strings of the completion, as listed in `logprobs.content[].token`. A token that is
    /// part of a multi-byte UTF-8 character has no exact string: see `completion_token_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<Vec<String>>,
    /// The raw bytes of each completion token whose string above is not exactly its bytes (a
    /// partial UTF-8 sequence, which servers send as an empty or lossy string), `null` for every
    /// other token. Present only when at least one token needs it (schema 2, later addition).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_token_bytes: Option<Vec<Option<Vec<u8>>>>,
    /// Logprob of each sampled completion token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f64>>,
}

impl TokenData {
    /// The completion's bytes, token by token: each token's raw bytes where recorded, else its
    /// string. `None` without token strings.
    pub fn completion_bytes(&self) -> Option<Vec<u8>> {
        let tokens = self.completion_tokens.as_ref()?;
        let mut out = Vec::new();
        for (i, t) in tokens.iter().enumerate() {
            match self
                .completion_token_bytes
                .as_ref()
                .and_then(|b| b.get(i))
                .and_then(Option::as_ref)
            {
                Some(raw) => out.extend_from_slice(raw),
                None => out.extend_from_slice(t.as_bytes()),
            }
        }
        Some(out)
    }
}

/// Which response field token data was read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenSource {
    /// OpenAI's `choices[0].logprobs.content[]`.
    OpenaiLogprobs,
    /// vLLM's (and SGLang's) `return_token_ids`: `prompt_token_ids` and `choices[0].token_ids`.
    VllmTokenIds,
    /// llama.cpp's `choices[0].logprobs.content[].id`, recorded only when there is one entry
    /// per completion token (completion ids only: llama.cpp does not return the prompt's).
    LlamacppLogprobs,
    /// llama.cpp's `__verbose.tokens` (requests with `"return_tokens": true, "verbose": true`):
    /// every completion token's id, the final end-of-generation token included.
    LlamacppTokens,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_token_data_reads_and_new_fields_stay_out_when_absent() {
        let old = r#"{"logprobs_source":"openai_logprobs","completion_tokens":["a","b"],"logprobs":[-1.0,-2.0]}"#;
        let t: TokenData = serde_json::from_str(old).unwrap();
        assert_eq!(t.completion_token_bytes, None);
        let back = serde_json::to_string(&t).unwrap();
        assert!(!back.contains("completion_token_bytes"), "{back}");
        assert_eq!(t.completion_bytes().unwrap(), b"ab");
    }

    #[test]
    fn raw_bytes_replace_lossy_strings() {
        // "é" split over two tokens: each string is empty, the bytes are what counts.
        let t = TokenData {
            token_ids_source: Some(TokenSource::LlamacppLogprobs),
            completion_token_ids: Some(vec![1, 2, 3]),
            completion_tokens: Some(vec!["x".into(), String::new(), String::new()]),
            completion_token_bytes: Some(vec![None, Some(vec![0xc3]), Some(vec![0xa9])]),
            ..TokenData::default()
        };
        assert_eq!(t.completion_bytes().unwrap(), "xé".as_bytes());
        let json = serde_json::to_string(&t).unwrap();
        assert!(
            json.contains(r#""token_ids_source":"llamacpp_logprobs""#),
            "{json}"
        );
        assert!(
            json.contains(r#""completion_token_bytes":[null,[195],[169]]"#),
            "{json}"
        );
        assert_eq!(serde_json::from_str::<TokenData>(&json).unwrap(), t);
    }
}
