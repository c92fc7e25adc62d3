-- Conversation search: the text of user and assistant messages in an FTS5
-- table keyed by the messages rowid (external content: the text is not
-- stored twice). Triggers keep it in step: messages are only ever inserted
-- and, with their session, deleted. A VACUUM renumbers rowids of tables
-- without an INTEGER PRIMARY KEY, so one would be followed by
-- INSERT INTO message_fts (message_fts) VALUES ('rebuild'); the store
-- never runs one.

CREATE VIRTUAL TABLE message_fts USING fts5(
    content,
    content = 'messages',
    content_rowid = 'rowid',
    tokenize = "unicode61 remove_diacritics 0"
);

INSERT INTO message_fts (rowid, content) SELECT rowid, content FROM messages WHERE role IN ('user', 'assistant');

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages WHEN new.role IN ('user', 'assistant') BEGIN
    INSERT INTO message_fts (rowid, content) VALUES (new.rowid, new.content);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages WHEN old.role IN ('user', 'assistant') BEGIN
    INSERT INTO message_fts (message_fts, rowid, content) VALUES ('delete', old.rowid, old.content);
END;
