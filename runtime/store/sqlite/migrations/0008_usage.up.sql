-- What each tenant's agents used per UTC day (tokens, their cost, model
-- calls, turns, tool calls, sessions): the accounting behind budgets and
-- GET /api/v1/usage. Rows only grow, by atomic increments, so concurrent
-- turns in many runtimes all count.

CREATE TABLE usage_daily (
    tenant        TEXT   NOT NULL CHECK (tenant <> ''),
    agent         TEXT   NOT NULL CHECK (agent <> ''),
    day           TEXT   NOT NULL,
    input_tokens  INTEGER NOT NULL DEFAULT 0 CHECK (input_tokens >= 0),
    output_tokens INTEGER NOT NULL DEFAULT 0 CHECK (output_tokens >= 0),
    cost_micros   INTEGER NOT NULL DEFAULT 0 CHECK (cost_micros >= 0),
    model_calls   INTEGER NOT NULL DEFAULT 0 CHECK (model_calls >= 0),
    turns         INTEGER NOT NULL DEFAULT 0 CHECK (turns >= 0),
    tool_calls    INTEGER NOT NULL DEFAULT 0 CHECK (tool_calls >= 0),
    sessions      INTEGER NOT NULL DEFAULT 0 CHECK (sessions >= 0),
    PRIMARY KEY (tenant, agent, day)
) STRICT;
