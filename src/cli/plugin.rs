//! `kubectl infergate`: the plugin's command line (the `infergate` binary
//! run as `kubectl-infergate`). Flags are turned into the plain options of
//! [`crate::plugin`]'s commands.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::plugin::{self, client::Connection, term::Output};

/// Watch, steer and explain infergate's InferenceServices.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-infergate",
    bin_name = "kubectl infergate",
    version,
    about = "Watch, steer and explain infergate's InferenceServices.",
    long_about = None,
    after_help = EXAMPLES
)]
pub struct PluginCli {
    /// The kubeconfig file (default: KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context (default: the current one).
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: PluginCommand,
}

const EXAMPLES: &str = "Examples:
  kubectl infergate status chat -n team-a          one screen: tracks, route, rollout, conditions
  kubectl infergate status chat -w                 redraw on every change
  kubectl infergate rollout status chat -w --timeout 30m
  kubectl infergate rollout promote chat           skip the remaining steps
  kubectl infergate why chat                       why it is not ready, and what to run next
  kubectl infergate fit meta-llama/Llama-3.1-70B-Instruct --class h100-80gb
  kubectl infergate budget -A                      every namespace's GPU budget
  kubectl infergate completion bash > /etc/bash_completion.d/kubectl-infergate";

/// The plugin's commands.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// One screen of a service: model and engine per track, replicas, the
    /// route's weights, the rollout, conditions, capacity and budget.
    ///
    /// Example: kubectl infergate status chat -n team-a -w
    Status(StatusArgs),
    /// Follow a progressive rollout, or promote, pause, resume or abort it.
    ///
    /// Example: kubectl infergate rollout status chat -w --timeout 30m
    Rollout(RolloutArgs),
    /// Why a service is not ready, most telling first, each with the next
    /// command to run: a policy or the spec, the serving graph or its
    /// Secret, pods no node can take (the scheduler's words), images that
    /// cannot be pulled, engines that crash (the last exit code), a canary
    /// held by its gate, routing.
    ///
    /// Exit status: 0 when the service is ready (anything worth knowing is
    /// still printed), 1 when it is not (the findings printed), 2 when it
    /// cannot be told (no such service, the API server unreachable).
    ///
    /// Example: kubectl infergate why chat -n team-a -o json
    Why(WhyArgs),
    /// Whether a model fits an AcceleratorClass at each tensor size, and
    /// the tokens and full-context requests it holds.
    ///
    /// Reads the cluster's ModelProfiles and AcceleratorClasses, or with -f
    /// manifest files (offline). Exit codes: 0 it fits at some tensor size,
    /// 1 at none, 2 the profile or class is missing.
    ///
    /// Example: kubectl infergate fit llama3-70b --class h100-80gb --max-model-len 32768
    Fit(FitArgs),
    /// Each namespace's GPU budget, what each service charges, what is left.
    ///
    /// A service's charge is its status.capacity (maxGPUs, costPerHour).
    /// Exit codes: 0 printed, 1 a namespace is over its GPU budget, 2 the
    /// API server could not be read.
    ///
    /// Example: kubectl infergate budget -A
    Budget(BudgetArgs),
    /// Print a shell completion script.
    ///
    /// Example: kubectl infergate completion zsh > ~/.zfunc/_kubectl-infergate
    Completion(CompletionArgs),
}

/// `-o`.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum OutputArg {
    /// The human screen.
    #[default]
    Text,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

impl From<OutputArg> for Output {
    fn from(o: OutputArg) -> Self {
        match o {
            OutputArg::Text => Output::Human,
            OutputArg::Json => Output::Json,
            OutputArg::Yaml => Output::Yaml,
        }
    }
}

/// Flags of `status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The InferenceService.
    pub name: String,
    /// Redraw on every watch event.
    #[arg(short = 'w', long)]
    pub watch: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    pub output: OutputArg,
}

/// Flags of `rollout`.
#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: RolloutCommand,
}

/// The rollout subcommands.
#[derive(Debug, Subcommand)]
pub enum RolloutCommand {
    /// Exit 0 when the rollout is promoted or the service stable, 1 when it
    /// rolled back, 2 on timeout (as `kubectl rollout status`).
    ///
    /// Without -w it prints where the rollout stands and exits: 0 also for
    /// a rollout still in progress (as `kubectl rollout status --watch=false`).
    /// With -w it waits on watch events until the status describes the
    /// current spec and the rollout ended, drawing its progress. A service
    /// without a canary rollout is stable at once (0); a missing service is
    /// an error (1).
    Status {
        /// The InferenceService.
        name: String,
        /// Wait until the rollout ends, drawing its progress.
        #[arg(short = 'w', long)]
        watch: bool,
        /// Give up after this long (e.g. 30m).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// Skip the remaining steps: the canary's version becomes the primary's.
    ///
    /// Each action writes infergate.dev/rollout-action VERB/TOKEN with a
    /// fresh token (server-side apply, field manager kubectl-infergate, not
    /// forced) and waits up to 60s until the reconciler acted on it: 0 acted
    /// on; 1 not acted on, the service has no canary rollout, or another
    /// field manager (a GitOps tool) owns the annotation (nothing is written;
    /// the manifest change to make is printed); 2 usage errors.
    Promote(ActArgs),
    /// Freeze the rollout at its step.
    Pause(ActArgs),
    /// Go on from where it was paused.
    Resume(ActArgs),
    /// Send all traffic back to the primary and remove the canary.
    Abort(ActArgs),
}

/// Flags of the rollout actions.
#[derive(Debug, Args)]
pub struct ActArgs {
    /// The InferenceService.
    pub name: String,
    /// Take the annotation over when another field manager (a GitOps tool)
    /// owns it; that tool may apply its own value again later (infergate
    /// ignores a value it acted on before).
    #[arg(long)]
    pub force: bool,
}

/// Flags of `why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The InferenceService.
    pub name: String,
    /// Output format: the sentences, or the findings as JSON or YAML.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    pub output: OutputArg,
}

/// Flags of `fit`.
#[derive(Debug, Args)]
pub struct FitArgs {
    /// The model ref (as in spec.model.ref; a ModelProfile lists it).
    pub model: String,
    /// The AcceleratorClass.
    #[arg(long)]
    pub class: String,
    /// The context every request may use (default: the profile's).
    #[arg(long)]
    pub max_model_len: Option<i64>,
    /// ModelProfile and AcceleratorClass manifests to read instead of the
    /// cluster (repeatable): offline.
    #[arg(short = 'f', long = "filename")]
    pub files: Vec<PathBuf>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    pub output: OutputArg,
}

/// Flags of `budget`.
#[derive(Debug, Args)]
pub struct BudgetArgs {
    /// Every namespace.
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t = OutputArg::Text)]
    pub output: OutputArg,
}

/// Flags of `completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Shells with completions.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Shell {
    /// bash.
    Bash,
    /// zsh.
    Zsh,
    /// fish.
    Fish,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    crate::engine::parse_go_duration(s)
}

/// Run the plugin.
pub fn run(cli: PluginCli) -> ExitCode {
    let connection = Connection {
        kubeconfig: cli.kubeconfig,
        context: cli.context,
        namespace: cli.namespace,
    };
    if let PluginCommand::Completion(args) = &cli.command {
        let shell = match args.shell {
            Shell::Bash => clap_complete::Shell::Bash,
            Shell::Zsh => clap_complete::Shell::Zsh,
            Shell::Fish => clap_complete::Shell::Fish,
        };
        clap_complete::generate(
            shell,
            &mut PluginCli::command(),
            "kubectl-infergate",
            &mut std::io::stdout(),
        );
        return ExitCode::SUCCESS;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        match cli.command {
            PluginCommand::Status(a) => {
                plugin::status::run(plugin::status::Options {
                    connection,
                    name: a.name,
                    watch: a.watch,
                    output: a.output.into(),
                })
                .await
            }
            PluginCommand::Rollout(a) => {
                use plugin::rollout::{Action, Options, Verb};
                let act = |a: ActArgs, verb| {
                    (
                        a.name,
                        Action::Act {
                            verb,
                            force: a.force,
                        },
                    )
                };
                let (name, action) = match a.command {
                    RolloutCommand::Status {
                        name,
                        watch,
                        timeout,
                    } => (name, Action::Status { watch, timeout }),
                    RolloutCommand::Promote(a) => act(a, Verb::Promote),
                    RolloutCommand::Pause(a) => act(a, Verb::Pause),
                    RolloutCommand::Resume(a) => act(a, Verb::Resume),
                    RolloutCommand::Abort(a) => act(a, Verb::Abort),
                };
                plugin::rollout::run(Options {
                    connection,
                    name,
                    action,
                })
                .await
            }
            PluginCommand::Why(a) => {
                plugin::why::run(plugin::why::Options {
                    connection,
                    name: a.name,
                    output: a.output.into(),
                })
                .await
            }
            PluginCommand::Fit(a) => {
                plugin::fit::run(plugin::fit::Options {
                    connection,
                    model: a.model,
                    class: a.class,
                    max_model_len: a.max_model_len,
                    files: a.files,
                    output: a.output.into(),
                })
                .await
            }
            PluginCommand::Budget(a) => {
                plugin::headroom::run(plugin::headroom::Options {
                    connection,
                    all_namespaces: a.all_namespaces,
                    output: a.output.into(),
                })
                .await
            }
            PluginCommand::Completion(_) => ExitCode::SUCCESS,
        }
    })
}

/// kubectl's completion of `kubectl infergate ...`: kubectl runs
/// `kubectl_complete-infergate ARGS...` (the words after `infergate`, the
/// last one being completed) and reads one candidate per line, then
/// `:DIRECTIVE` (4: no file completion), as for its own commands.
pub fn complete(words: &[String]) -> ExitCode {
    for candidate in candidates(words) {
        println!("{candidate}");
    }
    println!(":4");
    ExitCode::SUCCESS
}

/// The subcommands or flags that complete the last of `words`.
#[must_use]
pub fn candidates(words: &[String]) -> Vec<String> {
    let root = PluginCli::command();
    let (current, done) = match words.split_last() {
        Some((current, done)) => (current.as_str(), done),
        None => ("", &[][..]),
    };
    let mut cmd = &root;
    let mut globals: Vec<&clap::Arg> = root.get_arguments().filter(|a| a.is_global_set()).collect();
    let mut skip_value = false;
    for w in done {
        if skip_value {
            skip_value = false;
            continue;
        }
        if w.starts_with('-') {
            skip_value = !w.contains('=') && takes_value(cmd, &globals, w);
            continue;
        }
        if let Some(sub) = cmd.find_subcommand(w) {
            cmd = sub;
            globals.extend(cmd.get_arguments().filter(|a| a.is_global_set()));
        }
    }
    if skip_value {
        // A flag's value (a namespace, a file): nothing to offer here.
        return Vec::new();
    }
    if current.starts_with('-') {
        let mut flags: Vec<String> = cmd
            .get_arguments()
            .chain(globals.iter().copied())
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .chain(["--help".to_owned()])
            .filter(|f| f.starts_with(current))
            .collect();
        flags.sort();
        flags.dedup();
        return flags;
    }
    cmd.get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
        .map(|s| s.get_name().to_owned())
        .filter(|n| n.starts_with(current))
        .collect()
}

/// Whether the flag `w` of `cmd` (or a global one) takes a value.
fn takes_value(cmd: &clap::Command, globals: &[&clap::Arg], w: &str) -> bool {
    let matches = |a: &&clap::Arg| {
        if let Some(long) = w.strip_prefix("--") {
            a.get_long() == Some(long)
        } else {
            let short = w.trim_start_matches('-');
            short.len() == 1 && a.get_short().is_some_and(|s| short.starts_with(s))
        }
    };
    cmd.get_arguments()
        .chain(globals.iter().copied())
        .find(matches)
        .is_some_and(|a| a.get_action().takes_values())
}
