//! How a run ends: the exit statuses, the help paragraph that describes them, and the one
//! line on stderr that every failure becomes.

use std::process::ExitCode;

use posenc::{Error, ErrorKind};

/// Exit status for a valid request that failed while running.
const EXIT_RUNTIME: u8 = 1;
/// Exit status for invalid arguments or input.
const EXIT_USAGE: u8 = 2;

/// The exit statuses, as every command's help ends.
pub(crate) const EXIT_STATUS_HELP: &str = "Exit status: 0 on success; 1 when a valid request \
fails while running (a GPU asked for and missing, a GPU error, an unwritable output); 2 for \
invalid arguments or input, in which case nothing is written.";

/// A command's own help paragraphs, then the exit statuses.
pub(crate) fn with_exit_status(help: &str) -> String {
    format!("{help}\n\n{EXIT_STATUS_HELP}")
}

/// An error and the exit status it earns.
#[derive(Debug)]
pub(crate) struct Failure {
    code: u8,
    pub(crate) error: Error,
    /// Part of the result has reached its reader (a stream written as it was computed), so
    /// the work must not run again elsewhere: `--device auto` reports it instead.
    pub(crate) delivered: bool,
}

impl Failure {
    /// An error found while checking the request, whatever its kind, except memory refused
    /// while reading an input: the request is valid, the machine could not hold it.
    pub(crate) fn usage(error: Error) -> Self {
        if matches!(error, Error::Alloc { .. }) {
            return error.into();
        }
        Self { code: EXIT_USAGE, error, delivered: false }
    }

    /// This failure, met after part of the result reached its reader.
    pub(crate) fn after_delivery(self) -> Self {
        Self { delivered: true, ..self }
    }
}

impl From<Error> for Failure {
    fn from(error: Error) -> Self {
        // A malformed parameter or input is the caller's to fix even when found late (for
        // instance POSENC_MAX_BINDING_SIZE, read when the GPU opens). A shape mismatch
        // found while running is posenc's own mistake: the CLI checks shapes before it calls.
        let code = match error.kind() {
            ErrorKind::Usage | ErrorKind::Input => EXIT_USAGE,
            _ => EXIT_RUNTIME,
        };
        Self { code, error, delivered: false }
    }
}

/// The failure's line on stderr, and its exit status.
pub(crate) fn report(Failure { code, error, .. }: Failure) -> ExitCode {
    to_stderr(format_args!("posenc: {}\n", one_line(&error.to_string())));
    ExitCode::from(code)
}

/// Help and version go out whole; a parse error becomes its first paragraph joined into one
/// line (a missing argument's name is on the line after the message), because the usage
/// clap appends would bury what is wrong.
pub(crate) fn clap_exit(e: &clap::Error) -> ExitCode {
    if !e.use_stderr() {
        // Help and version are reports like any other: refused in one line where stdout
        // was closed at the start or cannot take them (`> /dev/full`), quiet on a closed
        // pipe (`| head -1`).
        // Styled on a terminal, as clap prints it (NO_COLOR honoured), plain elsewhere.
        let styled = std::io::IsTerminal::is_terminal(&std::io::stdout())
            && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let written = crate::output::check_report_stdout().and_then(|()| {
            crate::output::to_stdout(|out| {
                let text = e.render();
                if styled { write!(out, "{}", text.ansi()) } else { write!(out, "{text}") }
            })
        });
        return match written {
            Ok(()) => ExitCode::SUCCESS,
            Err(failure) => report(failure),
        };
    }
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let _ = e.print();
        return ExitCode::from(EXIT_USAGE);
    }
    if e.kind() == clap::error::ErrorKind::InvalidUtf8
        && let Some(message) = invalid_utf8()
    {
        to_stderr(format_args!("posenc: {}\n", one_line(&message)));
        return ExitCode::from(EXIT_USAGE);
    }
    if let Some(message) = empty_value(e) {
        to_stderr(format_args!("posenc: {}\n", one_line(&message)));
        return ExitCode::from(EXIT_USAGE);
    }
    let rendered = with_user_strings(e, e.render().to_string());
    let paragraph: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .skip_while(|l| l.is_empty())
        .take_while(|l| !l.is_empty())
        .collect();
    let message =
        if paragraph.is_empty() { "invalid arguments".into() } else { paragraph.join(" ") };
    // clap quotes the value given, whatever its length and bytes.
    let message = one_line(message.strip_prefix("error: ").unwrap_or(&message));
    to_stderr(format_args!("posenc: {message}\n"));
    ExitCode::from(EXIT_USAGE)
}

/// The strings of the user's that clap quotes (a value, an unknown flag or subcommand),
/// escaped and cut as every user string in an error line is (`posenc::message_text`, to
/// `MAX_SHOWN_CHARS`). clap quotes them as given, but for the terminal escape sequences
/// (`ESC [ ... m`, `ESC ] ... BEL`), which its rendering strips from all it prints:
/// `--dim $'8\e[31m'` read "invalid value '8'", not what was typed, a newline in a value
/// broke the message into lines of which one was kept (`--dim $'x\n\ny'`: "invalid value
/// 'x"), and a long value was cut only with the whole line (a stranger's and a reviewer's,
/// 2026-12-05). Each string of the error's context is put back in its shown form where the
/// message quotes it (the first quote, in every form of clap's messages).
fn with_user_strings(e: &clap::Error, mut rendered: String) -> String {
    use clap::error::ContextValue;
    for (_, value) in e.context() {
        let given: &[String] = match value {
            ContextValue::String(s) => std::slice::from_ref(s),
            ContextValue::Strings(v) => v,
            _ => continue,
        };
        for s in given {
            let stripped = clap::builder::StyledStr::from(s.clone()).to_string();
            let shown = posenc::message_text(s, posenc::MAX_SHOWN_CHARS);
            if shown != stripped {
                rendered = rendered.replacen(&format!("'{stripped}'"), &format!("'{shown}'"), 1);
            }
        }
    }
    rendered
}

/// clap says only "invalid UTF-8 was detected in one or more arguments": which argument
/// it is, shown with U+FFFD for its bytes that are not UTF-8, and the option it follows (a
/// stranger's, round twenty-seven).
fn invalid_utf8() -> Option<String> {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let (i, bad) = args.iter().enumerate().skip(1).find(|(_, a)| a.to_str().is_none())?;
    let shown = posenc::message_text(&bad.to_string_lossy(), posenc::MAX_SHOWN_CHARS);
    let after = args[i - 1]
        .to_str()
        .filter(|option| i > 1 && option.starts_with('-'))
        .map(|option| {
            format!(", after '{}'", posenc::message_text(option, posenc::MAX_SHOWN_CHARS))
        })
        .unwrap_or_default();
    Some(format!(
        "argument {i} is not valid UTF-8: '{shown}'{after} (only a path may hold bytes that \
         are not UTF-8)"
    ))
}

/// clap says "a value is required for '--output <PATH>' but none was supplied" both where
/// the value is missing and where it is empty (`-o ''`, `--output=`): the second told as
/// what it is (a stranger's, round twenty-three), when the option clap names, by one of its
/// own names, is followed by an empty word or ends in `=` on the command line.
fn empty_value(e: &clap::Error) -> Option<String> {
    use clap::CommandFactory;
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::InvalidValue {
        return None;
    }
    let (Some(ContextValue::String(value)), Some(ContextValue::String(arg))) =
        (e.get(ContextKind::InvalidValue), e.get(ContextKind::InvalidArg))
    else {
        return None;
    };
    if !value.is_empty() {
        return None;
    }
    // `--output <PATH>`: its long name; its short one (and aliases) from the command's
    // options of that long name, in whichever subcommand declares them.
    let long = arg.split_whitespace().next()?.strip_prefix("--")?.to_owned();
    let cli = crate::Cli::command();
    let mut names = vec![format!("--{long}")];
    for cmd in std::iter::once(&cli).chain(cli.get_subcommands()) {
        for a in cmd.get_arguments().filter(|a| a.get_long() == Some(long.as_str())) {
            names.extend(
                a.get_short_and_visible_aliases().into_iter().flatten().map(|c| format!("-{c}")),
            );
            names.extend(a.get_all_aliases().into_iter().flatten().map(|l| format!("--{l}")));
        }
    }
    let words: Vec<_> = std::env::args_os().skip(1).collect();
    let named = |w: &std::ffi::OsString| w.to_str().is_some_and(|w| names.iter().any(|n| n == w));
    let then_empty = words.windows(2).any(|w| named(&w[0]) && w[1].is_empty());
    let with_equals = words.iter().any(|w| {
        w.to_str().and_then(|w| w.strip_suffix('=')).is_some_and(|w| names.iter().any(|n| n == w))
    });
    if !(then_empty || with_equals) {
        return None;
    }
    let mut message = format!("invalid value '' for '{arg}': it is empty (a value is required)");
    if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue)
        && !valid.is_empty()
    {
        message.push_str(&format!(" [possible values: {}]", valid.join(", ")));
    }
    Some(message)
}

/// The most characters of a line on stderr: the values from the user in it are cut far
/// shorter already ([`posenc::MAX_SHOWN_CHARS`]); this bounds text from elsewhere (a driver's
/// message, clap's).
const MAX_LINE_CHARS: usize = 4096;

/// Joins a message's lines (wgpu's errors can span several, and the contract is one), cut
/// and with control characters escaped, as every line of posenc's is.
fn one_line(message: &str) -> String {
    let joined =
        message.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ");
    posenc::message_text(&joined, MAX_LINE_CHARS)
}

/// A `posenc: note:` line on stderr: something the run did that the user did not ask for.
pub(crate) fn note(message: &str) {
    to_stderr(format_args!("posenc: note: {}\n", one_line(message)));
}

/// Writes to stderr, as `eprint!` does but without its panic when stderr is gone (`2>&-`,
/// a closed pipe): the exit status still tells the caller, and nothing else can be done.
pub(crate) fn to_stderr(text: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let _ = std::io::stderr().write_fmt(text);
}
