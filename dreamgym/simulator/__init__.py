"""The synthetic side: the reasoning experience model, SimulatedEnv, experience-model SFT, the curriculum.

Builds on ``dreamgym.core`` (state and action formats, protocols) and the
replay store; never on the bridge.

- ``TemplateConfig``: the prompt templates and their ablation switches; every
  synthetic step records the template id.
- ``parse_answer``: the tolerant parser of the model's answers.
- ``LLMExperienceModel``: template + text backend + parser + call cache.
- ``SimulatedEnv``: the Environment protocol over an experience model, with
  retrieval from the store and the leakage rule's exclusions.
- ``OutcomeJudge``: a classifier over task-agnostic features that gives a
  prediction its reward and end (``fit_store_judge`` fits it on real steps).
- ``apply_rules``: what every prediction must say whatever the model wrote
  (``stop`` ends the episode, typed text stays in its field).
- ``backends``: ``OpenAIBackend`` (any OpenAI-compatible server) and
  ``LocalBackend`` (in-process transformers, batched).
- Curriculum: task values from group rewards, variations, the λ-capped pool.
"""

from dreamgym.simulator._build_check import BuildCheck, CheckConfig, check_build
from dreamgym.simulator._curriculum import (
    VARIATION_TEMPLATE_ID,
    CurriculumConfig,
    CurriculumStats,
    TaskPool,
    propose_variations,
    select_seed_tasks,
    task_value,
    variation_messages,
)
from dreamgym.simulator._env import SimulatedEnv, SimulatorConfig, SimulatorStats, real_start, real_start_pages
from dreamgym.simulator._fidelity import (
    BASELINES,
    CopyTopRetrieved,
    FidelitySummary,
    StepPredictions,
    StepScore,
    UnchangedPage,
    one_step_fidelity,
    predict_steps,
    score_prediction,
    score_step,
    summarise_scores,
    teacher_forced_queries,
    without_salvaged,
)
from dreamgym.simulator._judge import (
    FEATURES,
    JUDGE_FILE,
    OUTCOMES,
    OutcomeJudge,
    fit_judge,
    fit_store_judge,
    outcome_features,
)
from dreamgym.simulator._load import STRUCTURED_OUTPUTS, ServedModel, StructuredOutput, load_experience_model
from dreamgym.simulator._model import ExperienceModelConfig, ExperienceModelStats, LLMExperienceModel, call_cache_key
from dreamgym.simulator._parse import MAX_ANSWER_CHARS, ParsedAnswer, parse_answer, parse_initial_answer
from dreamgym.simulator._recorded import SAME_WEIGHTS, as_recorded, recipe_changes
from dreamgym.simulator._rules import (
    CHECK_ROLES,
    FOCUSABLE_ROLES,
    LIST_ROLES,
    TEXT_ROLES,
    apply_rules,
    checked_page,
    focus_after,
    rule_writes_page,
    selected_option_page,
    typed_text_page,
)
from dreamgym.simulator._sft import (
    METADATA_FILE,
    ScratchModelConfig,
    SFTExample,
    SimTrainConfig,
    annotate_reasoning,
    build_sft_examples,
    examples_digest,
    read_metadata,
    real_episodes,
    train_experience_model,
)
from dreamgym.simulator._templates import (
    MAX_PAST_ACTIONS,
    TemplateConfig,
    answer_pattern,
    answer_text,
    history_of,
    initial_answer_text,
)
from dreamgym.simulator.backends import LocalBackend, OpenAIBackend, weights_digest

__all__ = [
    "BASELINES",
    "CHECK_ROLES",
    "FEATURES",
    "FOCUSABLE_ROLES",
    "JUDGE_FILE",
    "LIST_ROLES",
    "MAX_ANSWER_CHARS",
    "MAX_PAST_ACTIONS",
    "METADATA_FILE",
    "OUTCOMES",
    "SAME_WEIGHTS",
    "STRUCTURED_OUTPUTS",
    "TEXT_ROLES",
    "VARIATION_TEMPLATE_ID",
    "BuildCheck",
    "CheckConfig",
    "CopyTopRetrieved",
    "CurriculumConfig",
    "CurriculumStats",
    "ExperienceModelConfig",
    "ExperienceModelStats",
    "FidelitySummary",
    "LLMExperienceModel",
    "LocalBackend",
    "OpenAIBackend",
    "OutcomeJudge",
    "ParsedAnswer",
    "SFTExample",
    "ScratchModelConfig",
    "ServedModel",
    "SimTrainConfig",
    "SimulatedEnv",
    "SimulatorConfig",
    "SimulatorStats",
    "StepPredictions",
    "StepScore",
    "StructuredOutput",
    "TaskPool",
    "TemplateConfig",
    "UnchangedPage",
    "annotate_reasoning",
    "answer_pattern",
    "answer_text",
    "apply_rules",
    "as_recorded",
    "build_sft_examples",
    "call_cache_key",
    "check_build",
    "checked_page",
    "examples_digest",
    "fit_judge",
    "fit_store_judge",
    "focus_after",
    "history_of",
    "initial_answer_text",
    "load_experience_model",
    "one_step_fidelity",
    "outcome_features",
    "parse_answer",
    "parse_initial_answer",
    "predict_steps",
    "propose_variations",
    "read_metadata",
    "real_episodes",
    "real_start",
    "real_start_pages",
    "recipe_changes",
    "rule_writes_page",
    "score_prediction",
    "score_step",
    "select_seed_tasks",
    "selected_option_page",
    "summarise_scores",
    "task_value",
    "teacher_forced_queries",
    "train_experience_model",
    "typed_text_page",
    "variation_messages",
    "weights_digest",
    "without_salvaged",
]
