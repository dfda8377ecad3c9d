//! Chat templates of the tiny fixtures, and the Hugging Face template features they rely on.

mod common;

use std::path::PathBuf;

use candle_core::quantized::gguf_file::Content;
use ruling_backend::{ChatMessage, Role};
use ruling_candle::template::{ChatTemplate, TemplateError};

fn gguf(name: &str) -> Content {
    let path = common::fixtures().join(format!("{name}.gguf"));
    let mut file = std::fs::File::open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `cargo xtask fixtures`", path.display()));
    Content::read(&mut file).expect("read gguf")
}

/// The template from the GGUF and from `tokenizer_config.json`, which must agree.
fn templates(name: &str) -> [ChatTemplate; 2] {
    [
        ChatTemplate::from_gguf(&gguf(name)).expect("from_gguf"),
        ChatTemplate::from_tokenizer_config(
            common::fixtures().join(name).join("tokenizer_config.json"),
        )
        .expect("from_tokenizer_config"),
    ]
}

fn with_system() -> Vec<ChatMessage> {
    vec![
        ChatMessage::new(Role::System, "Answer with a letter."),
        ChatMessage::new(Role::User, "Is it?\nA. yes\nB. no"),
        ChatMessage::new(Role::Assistant, "B"),
        ChatMessage::new(Role::User, "And now?"),
    ]
}

fn without_system() -> Vec<ChatMessage> {
    vec![ChatMessage::new(Role::User, "Hi")]
}

const CHATML_WITH_SYSTEM: &str = "<|im_start|>system\nAnswer with a letter.<|im_end|>\n\
<|im_start|>user\nIs it?\nA. yes\nB. no<|im_end|>\n\
<|im_start|>assistant\nB<|im_end|>\n\
<|im_start|>user\nAnd now?<|im_end|>\n";

const ASSISTANT_START: &str = "<|im_start|>assistant\n";

#[test]
fn smollm_style_template_renders_chatml() {
    for template in templates("tiny-llama") {
        assert_eq!(
            template.render(&with_system(), true).unwrap(),
            format!("{CHATML_WITH_SYSTEM}{ASSISTANT_START}")
        );
        assert_eq!(
            template.render(&with_system(), false).unwrap(),
            CHATML_WITH_SYSTEM
        );
        assert_eq!(
            template.render(&without_system(), true).unwrap(),
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(template.bos_token(), "<|im_start|>");
        assert_eq!(template.eos_token(), "<|im_end|>");
    }
}

#[test]
fn qwen_style_template_renders_chatml_and_injects_its_system_turn() {
    for template in templates("tiny-qwen2") {
        assert_eq!(
            template.render(&with_system(), true).unwrap(),
            format!("{CHATML_WITH_SYSTEM}{ASSISTANT_START}")
        );
        assert_eq!(
            template.render(&without_system(), true).unwrap(),
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n\
             <|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
        assert_eq!(template.eos_token(), "<|im_end|>");
    }
}

#[test]
fn raise_exception_fails_with_its_message() {
    let template = ChatTemplate::new(
        "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}ok",
        "",
        "",
    )
    .unwrap();
    let err = template.render(&with_system(), true).unwrap_err();
    assert!(
        matches!(&err, TemplateError::Raised { message } if message == "System role not supported"),
        "{err:?}"
    );
    assert!(err.to_string().contains("System role not supported"));
    assert_eq!(template.render(&without_system(), true).unwrap(), "ok");
}

#[test]
fn python_string_and_dict_methods_work() {
    let source = "{% for m in messages %}\
        {% if m.content.startswith('  ') %}[{{ m.content.strip() }}]{% endif %}\
        {{ m.role.upper() }}:{{ m.content.split('|')[0].rstrip() }};\
        {% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}\n\
        {% endfor %}";
    let template = ChatTemplate::new(source, "", "").unwrap();
    let messages = vec![
        ChatMessage::new(Role::User, "  padded  "),
        ChatMessage::new(Role::Assistant, "x  | y"),
    ];
    assert_eq!(
        template.render(&messages, false).unwrap(),
        // trim_blocks eats the newline after `{% endfor %}`, as in jinja2.
        "[padded]USER:  padded;a=1ASSISTANT:x;a=1"
    );
}

#[test]
fn hugging_face_whitespace_loop_controls_and_context() {
    // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
    let source = "{% for m in messages %}\n    {% if loop.index > 1 %}{% break %}{% endif %}\n{{ m.content }}|\n{% endfor %}\n\
                  {{ bos_token }}{{ eos_token }}{{ enable_thinking }}{{ add_generation_prompt }}";
    let template = ChatTemplate::new(source, "<s>", "</s>").unwrap();
    assert_eq!(
        template.render(&with_system(), true).unwrap(),
        // Booleans print as Python prints them; jinja2 gives this same string.
        "Answer with a letter.|\n<s></s>FalseTrue"
    );
}

#[test]
fn tojson_writes_like_transformers() {
    let template = ChatTemplate::new("{{ {'a': '<é>', 'b': [1, 2]} | tojson }}", "", "").unwrap();
    assert_eq!(
        template.render(&[], false).unwrap(),
        r#"{"a": "<é>", "b": [1, 2]}"#
    );
}

#[test]
fn strftime_now_is_available() {
    let template = ChatTemplate::new("{{ strftime_now('%Y-%m-%d') }}", "", "").unwrap();
    let date = template.render(&[], false).unwrap();
    assert_eq!(date.len(), 10, "{date}");
    assert!(date.starts_with("20"), "{date}");
}

#[test]
fn a_syntax_error_is_a_compile_error() {
    let err = ChatTemplate::new("{% for m in messages %}", "", "").unwrap_err();
    assert!(matches!(err, TemplateError::Compile { .. }), "{err:?}");
}

#[test]
fn a_missing_template_is_the_typed_error() {
    let mut content = gguf("tiny-llama");
    content.metadata.remove("tokenizer.chat_template");
    let err = ChatTemplate::from_gguf(&content).unwrap_err();
    assert!(matches!(err, TemplateError::Missing { .. }), "{err:?}");
    assert!(err.to_string().contains("tokenizer.chat_template"), "{err}");

    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("template-missing");
    std::fs::create_dir_all(&dir).unwrap();
    let _ = std::fs::remove_file(dir.join("chat_template.jinja"));
    let config = dir.join("tokenizer_config.json");
    std::fs::write(&config, r#"{"bos_token": "<bos>", "eos_token": "<eos>"}"#).unwrap();
    let err = ChatTemplate::from_tokenizer_config(&config).unwrap_err();
    assert!(matches!(err, TemplateError::Missing { .. }), "{err:?}");

    // A chat_template.jinja beside it is where newer transformers saves the template.
    std::fs::write(dir.join("chat_template.jinja"), "{{ bos_token }}!").unwrap();
    let template = ChatTemplate::from_tokenizer_config(&config).unwrap();
    assert_eq!(template.render(&[], false).unwrap(), "<bos>!");
}

#[test]
fn named_templates_pick_default() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("template-named");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("tokenizer_config.json");
    std::fs::write(
        &config,
        r#"{"chat_template": [{"name": "tool_use", "template": "tools"},
                              {"name": "default", "template": "plain {{ eos_token }}"}],
            "eos_token": {"content": "</s>", "special": true}}"#,
    )
    .unwrap();
    let template = ChatTemplate::from_tokenizer_config(&config).unwrap();
    assert_eq!(template.render(&[], false).unwrap(), "plain </s>");
}
