//! Logging and tracing set-up.
//!
//! `RUST_LOG` selects what is logged (default `info` for infergate, `warn`
//! for everything else); `--log-format` chooses human-readable text or one
//! JSON object per line.

use tracing_subscriber::EnvFilter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The filter used when `RUST_LOG` is unset.
pub const DEFAULT_FILTER: &str = "warn,infergate=info";

/// Install the global tracing subscriber. Calling it twice (tests) is harmless:
/// the second call leaves the first subscriber in place.
pub fn init(format: LogFormat) {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Colours only on a terminal: a log file or `kubectl logs` gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.with_target(true).try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
}

/// Bytes of an untrusted string kept by [`Bounded`].
pub const UNTRUSTED_MAX: usize = 256;

/// An untrusted string (from a request, a fetched document, an error that
/// quotes one) made fit for a log line, a status message or an answer: cut
/// to [`UNTRUSTED_MAX`] bytes (on a character boundary, with how much was
/// cut) and with control characters escaped, so it can neither flood a log
/// nor forge a line of it.
#[derive(Clone, Copy, Debug)]
pub struct Bounded<'a>(pub &'a str);

/// Bytes of a message built from untrusted parts kept by [`bounded_message`].
pub const MESSAGE_MAX: usize = 4096;

/// A message that quotes untrusted strings (every field error of an object,
/// say) made fit for an answer or a status: cut to [`MESSAGE_MAX`] bytes,
/// control characters escaped, as [`Bounded`] does with a single string.
#[must_use]
pub fn bounded_message(message: &str) -> String {
    let mut out = String::with_capacity(message.len().min(MESSAGE_MAX + 32));
    let _ = write_bounded(&mut out, message, MESSAGE_MAX);
    out
}

/// Bytes of a condition message or an event note ([`cut_message`]); the
/// events API refuses notes over 1 KiB.
pub const STATUS_MESSAGE_MAX: usize = 1024;

/// Bytes of a condition message that quotes the scheduler or the kubelet
/// ([`cut_condition_message`]): room for
/// infergate's own prefix (a track, its counts, an image) and a kibibyte
/// of the scheduler's or the kubelet's words after it, which are not cut
/// to make room for the prefix. The API server takes 32 KiB.
pub const CONDITION_MESSAGE_MAX: usize = 4096;

/// `message` in at most [`STATUS_MESSAGE_MAX`] bytes: control characters
/// escaped and, when it does not fit, cut with a count of the bytes left
/// out.
#[must_use]
pub fn cut_message(message: &str) -> String {
    cut_to(message, STATUS_MESSAGE_MAX)
}

/// A condition message in at most [`CONDITION_MESSAGE_MAX`] bytes, as
/// [`cut_message`] cuts an event note.
#[must_use]
pub fn cut_condition_message(message: &str) -> String {
    cut_to(message, CONDITION_MESSAGE_MAX)
}

fn cut_to(message: &str, max: usize) -> String {
    let fits = message.len() <= max && !message.chars().any(char::is_control);
    if fits {
        return message.to_owned();
    }
    // Room for the escapes and the "...(N more bytes)" suffix.
    let mut out = String::with_capacity(max);
    let budget = max - 32;
    let mut used = 0;
    for (i, c) in message.char_indices() {
        let piece: String = if c.is_control() {
            c.escape_default().collect()
        } else {
            c.to_string()
        };
        if out.len() + piece.len() > budget {
            break;
        }
        out.push_str(&piece);
        used = i + c.len_utf8();
    }
    if used < message.len() {
        let _ = std::fmt::Write::write_fmt(
            &mut out,
            format_args!("...({} more bytes)", message.len() - used),
        );
    }
    out
}

fn write_bounded(f: &mut impl std::fmt::Write, s: &str, max: usize) -> std::fmt::Result {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    for c in s[..end].chars() {
        if c.is_control() {
            for e in c.escape_default() {
                f.write_char(e)?;
            }
        } else {
            f.write_char(c)?;
        }
    }
    if end < s.len() {
        write!(f, "...({} more bytes)", s.len() - end)?;
    }
    Ok(())
}

impl std::fmt::Display for Bounded<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write_bounded(f, self.0, UNTRUSTED_MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_messages_fit_in_a_kibibyte_and_say_what_was_left_out() {
        assert_eq!(cut_message("short"), "short");
        let long = "violation; ".repeat(1000);
        let cut = cut_message(&long);
        assert!(cut.len() <= STATUS_MESSAGE_MAX, "{}", cut.len());
        let left = long.len() - cut.find("...(").expect("suffix");
        assert!(cut.ends_with(&format!("...({left} more bytes)")), "{cut}");
        let lines = "a\n".repeat(2000);
        let cut = cut_message(&lines);
        assert!(cut.len() <= STATUS_MESSAGE_MAX && !cut.contains('\n'));
        let wide = "\u{1F600}".repeat(1000);
        assert!(cut_message(&wide).len() <= STATUS_MESSAGE_MAX);
    }

    #[test]
    fn untrusted_strings_are_cut_and_cannot_forge_lines() {
        assert_eq!(Bounded("plain name").to_string(), "plain name");
        assert_eq!(
            Bounded("a\nlevel=error msg=forged\r\u{1b}[31m").to_string(),
            "a\\nlevel=error msg=forged\\r\\u{1b}[31m"
        );
        let long = "x".repeat(1 << 20);
        let shown = Bounded(&long).to_string();
        assert!(shown.len() < UNTRUSTED_MAX + 40, "{}", shown.len());
        assert!(shown.ends_with(&format!("...({} more bytes)", (1 << 20) - UNTRUSTED_MAX)));
        let many = "field is wrong\n".repeat(1000);
        let message = bounded_message(&many);
        assert!(message.len() < 2 * MESSAGE_MAX && !message.contains('\n'));
        // Never cut inside a character.
        let wide = "é".repeat(UNTRUSTED_MAX);
        let shown = Bounded(&wide).to_string();
        assert!(shown.starts_with(&"é".repeat(UNTRUSTED_MAX / 2)));
    }
}
