//! Parsing a chat completion body leniently but honestly: whatever the server returned is kept,
//! nothing is invented, and a body that is not a usable completion is an error of its own kind.

use serde::Deserialize;

use trajectory::record::{
    ChatMessage, ChatToolCall, ErrorKind, FunctionCall, Role, TokenData, TokenSource, Usage,
};

/// A usable completion.
#[derive(Debug, Clone)]
pub struct Completion {
    pub message: ChatMessage,
    pub finish_reason: Option<String>,
    pub usage: Option<Usage>,
    pub served_model: Option<String>,
    pub tokens: Option<TokenData>,
}

#[derive(Deserialize)]
struct RawCompletion {
    #[serde(default)]
    model: Option<String>,
    choices: Vec<RawChoice>,
    #[serde(default)]
    usage: Option<serde_json::Value>,
    /// vLLM with `return_token_ids`.
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
    /// llama.cpp with `"verbose": true`; its `tokens` with `"return_tokens": true`.
    #[serde(default, rename = "__verbose")]
    llamacpp_verbose: Option<RawLlamaVerbose>,
}

#[derive(Deserialize)]
struct RawLlamaVerbose {
    #[serde(default)]
    tokens: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct RawChoice {
    #[serde(default)]
    message: Option<RawMessage>,
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<RawLogprobs>,
    /// vLLM and SGLang with `return_token_ids`.
    #[serde(default)]
    token_ids: Option<Vec<u32>>,
    /// SGLang with `return_token_ids` (per choice; vLLM's is top-level).
    #[serde(default)]
    prompt_token_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct RawMessage {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<RawToolCall>>,
    #[serde(default, alias = "reasoning")]
    reasoning_content: Option<String>,
}

#[derive(Deserialize)]
struct RawToolCall {
    #[serde(default)]
    id: Option<String>,
    function: RawFunction,
}

#[derive(Deserialize)]
struct RawFunction {
    name: String,
    /// A JSON string per the spec; some providers send the object itself.
    #[serde(default)]
    arguments: serde_json::Value,
}

#[derive(Deserialize)]
struct RawLogprobs {
    #[serde(default)]
    content: Option<Vec<RawTokenLogprob>>,
}

#[derive(Deserialize)]
struct RawTokenLogprob {
    #[serde(default)]
    token: String,
    logprob: f64,
    /// llama.cpp: the token's id.
    #[serde(default)]
    id: Option<u32>,
    /// OpenAI and llama.cpp: the token's raw bytes (the string may be lossy).
    #[serde(default)]
    bytes: Option<Vec<u8>>,
}

/// Parses a 2xx body. Errors are `(kind, message)`.
pub fn parse_completion(body: &str) -> Result<Completion, (ErrorKind, String)> {
    let raw: RawCompletion = serde_json::from_str(body).map_err(|e| {
        (
            ErrorKind::MalformedResponse,
            format!("not a chat completion: {e}"),
        )
    })?;
    let served_model = raw.model;
    let usage = raw.usage.as_ref().map(parse_usage);
    let usage_ref = usage.as_ref();
    let Some(choice) = raw.choices.into_iter().next() else {
        return Err((
            ErrorKind::EmptyChoice,
            "the completion has no choices".into(),
        ));
    };
    let Some(msg) = choice.message else {
        return Err((
            ErrorKind::EmptyChoice,
            "the first choice has no message".into(),
        ));
    };
    let tool_calls: Vec<ChatToolCall> = msg
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .enumerate()
        .map(|(i, c)| ChatToolCall {
            id: c
                .id
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("call_{i}")),
            kind: "function".to_string(),
            function: FunctionCall {
                name: c.function.name,
                arguments: match c.function.arguments {
                    serde_json::Value::String(s) => s,
                    serde_json::Value::Null => String::new(),
                    other => other.to_string(),
                },
            },
        })
        .collect();
    if msg.content.is_none() && tool_calls.is_empty() {
        return Err((
            ErrorKind::EmptyChoice,
            "the message has neither content nor tool calls".into(),
        ));
    }
    let tokens = token_data(
        choice.logprobs.and_then(|l| l.content),
        Ids {
            vllm: choice.token_ids,
            vllm_prompt: raw.prompt_token_ids.or(choice.prompt_token_ids),
            llamacpp: raw.llamacpp_verbose.and_then(|v| v.tokens),
            completion_tokens: usage_ref.map(|u| u.completion_tokens),
        },
    );
    Ok(Completion {
        message: ChatMessage {
            role: Role::Assistant,
            content: msg.content,
            tool_calls: (!tool_calls.is_empty()).then_some(tool_calls),
            tool_call_id: None,
            reasoning_content: msg.reasoning_content,
        },
        finish_reason: choice.finish_reason,
        usage,
        served_model,
        tokens,
    })
}

/// Token ids a response may carry besides its logprob entries.
struct Ids {
    /// vLLM's and SGLang's `choices[0].token_ids`.
    vllm: Option<Vec<u32>>,
    /// vLLM's top-level or SGLang's per-choice `prompt_token_ids`.
    vllm_prompt: Option<Vec<u32>>,
    /// llama.cpp's `__verbose.tokens`.
    llamacpp: Option<Vec<u32>>,
    /// `usage.completion_tokens`, when reported.
    completion_tokens: Option<u64>,
}

/// Token data from wherever this server family puts it: ids from vLLM's and SGLang's
/// `token_ids`/`prompt_token_ids`, else llama.cpp's `__verbose.tokens`, else llama.cpp's per-entry
/// `id` when there is one entry per completion token (llama.cpp merges the tokens of a character
/// split over several into one entry, carrying the last one's id: then those ids are not the
/// completion's and are not recorded); raw bytes for the entries whose string is not exactly
/// their bytes. `None` when the server sent none.
fn token_data(content: Option<Vec<RawTokenLogprob>>, ids: Ids) -> Option<TokenData> {
    let mut tokens = TokenData::default();
    if let Some(content) = content {
        tokens.logprobs_source = Some(TokenSource::OpenaiLogprobs);
        tokens.logprobs = Some(content.iter().map(|t| t.logprob).collect());
        let bytes: Vec<Option<Vec<u8>>> = content
            .iter()
            .map(|t| {
                t.bytes
                    .clone()
                    .filter(|b| b.as_slice() != t.token.as_bytes())
            })
            .collect();
        if bytes.iter().any(Option::is_some) {
            tokens.completion_token_bytes = Some(bytes);
        }
        let entry_ids: Option<Vec<u32>> = content.iter().map(|t| t.id).collect();
        let one_per_token = |v: &Vec<u32>| {
            !v.is_empty() && ids.completion_tokens.is_none_or(|n| n == v.len() as u64)
        };
        if let Some(entry_ids) = entry_ids.filter(one_per_token) {
            tokens.token_ids_source = Some(TokenSource::LlamacppLogprobs);
            tokens.completion_token_ids = Some(entry_ids);
        }
        tokens.completion_tokens = Some(content.into_iter().map(|t| t.token).collect());
    }
    if let Some(all) = ids.llamacpp {
        tokens.token_ids_source = Some(TokenSource::LlamacppTokens);
        tokens.completion_token_ids = Some(all);
    }
    if ids.vllm.is_some() || ids.vllm_prompt.is_some() {
        tokens.token_ids_source = Some(TokenSource::VllmTokenIds);
        tokens.completion_token_ids = ids.vllm;
        tokens.prompt_token_ids = ids.vllm_prompt;
    }
    let has_tokens = tokens.logprobs_source.is_some() || tokens.token_ids_source.is_some();
    has_tokens.then_some(tokens)
}

/// Reads `usage`, tolerating nulls and missing counts.
fn parse_usage(v: &serde_json::Value) -> Usage {
    let n = |k: &str| v.get(k).and_then(serde_json::Value::as_u64).unwrap_or(0);
    let (prompt, completion) = (n("prompt_tokens"), n("completion_tokens"));
    let total = v
        .get("total_tokens")
        .and_then(serde_json::Value::as_u64)
        .unwrap_or(prompt + completion);
    Usage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_tokens_only_when_returned() {
        let body = r#"{"model":"m","choices":[{"message":{"role":"assistant","content":"hi"},
            "finish_reason":"stop","logprobs":{"content":[{"token":"hi","logprob":-0.5}]},
            "token_ids":[7]}],"prompt_token_ids":[1,2],"usage":{"prompt_tokens":2,"completion_tokens":1}}"#;
        let c = parse_completion(body).unwrap();
        let t = c.tokens.unwrap();
        assert_eq!(t.logprobs, Some(vec![-0.5]));
        assert_eq!(t.completion_token_ids, Some(vec![7]));
        assert_eq!(t.prompt_token_ids, Some(vec![1, 2]));
        assert_eq!(c.usage.unwrap().total_tokens, 3);
        let plain = r#"{"choices":[{"message":{"content":"hi"}}]}"#;
        assert!(parse_completion(plain).unwrap().tokens.is_none());
    }

    #[test]
    fn keeps_llama_cpp_ids_and_the_bytes_of_partial_utf8_tokens() {
        // What llama.cpp sends for "é!" split over three tokens (the first two halves of "é").
        let body = r#"{"choices":[{"message":{"role":"assistant","content":"é!"},
            "finish_reason":"length","logprobs":{"content":[
              {"id":200,"token":"","bytes":[195],"logprob":-0.1,"top_logprobs":[]},
              {"id":201,"token":"","bytes":[169],"logprob":-0.2,"top_logprobs":[]},
              {"id":0,"token":"!","bytes":[33],"logprob":-0.3,"top_logprobs":[]}]}}],
            "usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.finish_reason.as_deref(), Some("length"));
        let t = c.tokens.unwrap();
        assert_eq!(t.token_ids_source, Some(TokenSource::LlamacppLogprobs));
        assert_eq!(t.completion_token_ids, Some(vec![200, 201, 0]));
        assert_eq!(t.prompt_token_ids, None);
        assert_eq!(
            t.completion_token_bytes,
            Some(vec![Some(vec![195]), Some(vec![169]), None])
        );
        assert_eq!(t.completion_bytes().unwrap(), "é!".as_bytes());
        assert_eq!(t.logprobs.unwrap().len(), 3);
    }

    #[test]
    fn openai_entries_without_ids_record_no_ids_and_exact_bytes_are_not_repeated() {
        let body = r#"{"choices":[{"message":{"content":"hi"},"logprobs":{"content":[
            {"token":"hi","bytes":[104,105],"logprob":-0.5}]}}]}"#;
        let t = parse_completion(body).unwrap().tokens.unwrap();
        assert_eq!(t.token_ids_source, None);
        assert_eq!(t.completion_token_ids, None);
        assert_eq!(t.completion_token_bytes, None);
        // vLLM's own ids win over any per-entry ids.
        let both = r#"{"choices":[{"message":{"content":"hi"},"token_ids":[9],
            "logprobs":{"content":[{"id":4,"token":"hi","logprob":-0.5}]}}]}"#;
        let t = parse_completion(both).unwrap().tokens.unwrap();
        assert_eq!(t.token_ids_source, Some(TokenSource::VllmTokenIds));
        assert_eq!(t.completion_token_ids, Some(vec![9]));
    }

    #[test]
    fn merged_entries_give_no_ids_and_llama_cpp_verbose_tokens_give_them_all() {
        // llama.cpp: " 😊" is two tokens (40303, 228) but one logprob entry, with the last id.
        let merged = r#"{"choices":[{"message":{"content":"! 😊"},"finish_reason":"stop",
            "logprobs":{"content":[{"id":17,"token":"!","bytes":[33],"logprob":-0.1},
              {"id":228,"token":" 😊","bytes":[32,240,159,152,138],"logprob":-0.2},
              {"id":2,"token":"","bytes":[],"logprob":-0.3}]}}],
            "usage":{"prompt_tokens":5,"completion_tokens":4,"total_tokens":9}}"#;
        let t = parse_completion(merged).unwrap().tokens.unwrap();
        assert_eq!(
            t.token_ids_source, None,
            "3 entries for 4 tokens: no ids from them"
        );
        assert_eq!(t.completion_token_ids, None);
        assert_eq!(t.logprobs.as_ref().unwrap().len(), 3);
        assert_eq!(t.completion_bytes().unwrap(), "! 😊".as_bytes());
        // The same with `return_tokens` and `verbose`: every id, from `__verbose.tokens`.
        let verbose = merged.replacen(
            r#""usage""#,
            r#""__verbose":{"tokens":[17,40303,228,2],"prompt":"..."},"usage""#,
            1,
        );
        let t = parse_completion(&verbose).unwrap().tokens.unwrap();
        assert_eq!(t.token_ids_source, Some(TokenSource::LlamacppTokens));
        assert_eq!(t.completion_token_ids, Some(vec![17, 40303, 228, 2]));
    }

    #[test]
    fn sglang_sends_the_prompt_ids_in_the_choice() {
        let body = r#"{"choices":[{"message":{"content":"hi"},"token_ids":[7,2],
            "prompt_token_ids":[1,2,3]}]}"#;
        let t = parse_completion(body).unwrap().tokens.unwrap();
        assert_eq!(t.token_ids_source, Some(TokenSource::VllmTokenIds));
        assert_eq!(t.prompt_token_ids, Some(vec![1, 2, 3]));
        assert_eq!(t.completion_token_ids, Some(vec![7, 2]));
    }

    #[test]
    fn empty_content_is_a_completion() {
        // A real server may stop at once (EOS first): an empty answer, not a broken response.
        let body = r#"{"choices":[{"message":{"role":"assistant","content":""},
            "finish_reason":"stop","logprobs":{"content":[]}}]}"#;
        let c = parse_completion(body).unwrap();
        assert_eq!(c.message.content.as_deref(), Some(""));
        let t = c.tokens.unwrap();
        assert_eq!(t.completion_token_ids, None);
        assert_eq!(t.logprobs, Some(vec![]));
    }

    #[test]
    fn classifies_unusable_bodies() {
        assert_eq!(
            parse_completion("{oops").unwrap_err().0,
            ErrorKind::MalformedResponse
        );
        assert_eq!(
            parse_completion(r#"{"choices":[]}"#).unwrap_err().0,
            ErrorKind::EmptyChoice
        );
        assert_eq!(
            parse_completion(r#"{"choices":[{"message":{"content":null}}]}"#)
                .unwrap_err()
                .0,
            ErrorKind::EmptyChoice
        );
    }

    #[test]
    fn accepts_object_arguments_and_missing_ids() {
        let body = r#"{"choices":[{"message":{"content":null,"tool_calls":[
            {"type":"function","function":{"name":"run_python","arguments":{"code":"print(1)"}}}]}}]}"#;
        let c = parse_completion(body).unwrap();
        let call = &c.message.tool_calls.unwrap()[0];
        assert_eq!(call.id, "call_0");
        assert_eq!(call.function.arguments, r#"{"code":"print(1)"}"#);
    }
}
