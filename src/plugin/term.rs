//! Colours and redraws, only on a terminal (and never with `NO_COLOR`).

use std::io::IsTerminal;

/// How a command prints what it found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Output {
    /// For people: the screen.
    #[default]
    Human,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

impl Output {
    /// `value` as this format says: `human` draws the screen; JSON (pretty,
    /// with a final newline) and YAML serialise it.
    pub fn format<T: serde::Serialize>(
        self,
        value: &T,
        human: impl FnOnce(&T) -> String,
    ) -> Result<String, String> {
        match self {
            Output::Human => Ok(human(value)),
            Output::Json => serde_json::to_string_pretty(value)
                .map(|s| s + "\n")
                .map_err(|e| e.to_string()),
            Output::Yaml => serde_saphyr::to_string(value).map_err(|e| e.to_string()),
        }
    }
}

/// How output is drawn.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Style {
    /// ANSI colours.
    pub colour: bool,
    /// Clear the screen before each redraw.
    pub redraw: bool,
}

impl Style {
    /// Plain text: no colours, no redraw (piped output, tests).
    pub const PLAIN: Style = Style {
        colour: false,
        redraw: false,
    };

    /// Colours and redraws when stdout is a terminal and `NO_COLOR` is unset
    /// (redraws on any terminal).
    #[must_use]
    pub fn detect() -> Self {
        let tty = std::io::stdout().is_terminal();
        Style {
            colour: tty && std::env::var_os("NO_COLOR").is_none(),
            redraw: tty,
        }
    }

    /// `text` in green (good), yellow (waiting) or red (bad), when colours are on.
    #[must_use]
    pub fn paint(self, tone: Tone, text: &str) -> String {
        if !self.colour {
            return text.to_owned();
        }
        let code = match tone {
            Tone::Good => "32",
            Tone::Wait => "33",
            Tone::Bad => "31",
            Tone::Dim => "2",
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }

    /// What to print before a frame: clear the screen on a terminal.
    #[must_use]
    pub fn frame_start(self) -> &'static str {
        if self.redraw { "\x1b[H\x1b[2J" } else { "" }
    }
}

/// The tone of a word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tone {
    /// Ready, True, promoted.
    Good,
    /// Progressing, Unknown, pending.
    Wait,
    /// Failed, rolled back, unschedulable.
    Bad,
    /// Less important detail.
    Dim,
}

/// The tone of a condition's status.
#[must_use]
pub fn tone_of(status: &str) -> Tone {
    match status {
        "True" => Tone::Good,
        "False" => Tone::Bad,
        _ => Tone::Wait,
    }
}
