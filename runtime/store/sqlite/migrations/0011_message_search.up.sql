-- Conversation search: the text of user and assistant messages, and their
-- session id (so a search narrows to one chat inside the index), in an FTS5
-- table keyed by the messages rowid (external content: the text is not
-- stored twice). Triggers keep it in step: messages are only ever inserted
-- and, with their session, deleted. A VACUUM renumbers rowids of tables
-- without an INTEGER PRIMARY KEY, so one would be followed by
-- INSERT INTO message_fts (message_fts) VALUES ('rebuild'); the store
-- never runs one.

CREATE VIRTUAL TABLE message_fts USING fts5(
    content,
    session_id,
    content = 'messages',
    content_rowid = 'rowid',
    tokenize = "unicode61 remove_diacritics 0"
);

INSERT INTO message_fts (rowid, content, session_id)
    SELECT rowid, content, session_id FROM messages WHERE role IN ('user', 'assistant');

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.role IN ('user', 'assistant') BEGIN
    INSERT INTO message_fts (rowid, content, session_id) VALUES (new.rowid, new.content, new.session_id);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.role IN ('user', 'assistant') BEGIN
    INSERT INTO message_fts (message_fts, rowid, content, session_id) VALUES ('delete', old.rowid, old.content, old.session_id);
END;
