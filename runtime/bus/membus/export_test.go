package membus

// PendingIndexLen exposes the length of a group's ordered pending index
// (acked seqs included until compaction) to the tests.
func PendingIndexLen(b *Bus, stream, group string) int {
	s, _ := b.stream(stream, false)
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.groups[group].order)
}
