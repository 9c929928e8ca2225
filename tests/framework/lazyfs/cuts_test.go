package lazyfs

// Cuts is the number of cuts so far.
func (m *Mount) Cuts() int {
	m.fs.mu.Lock()
	defer m.fs.mu.Unlock()
	return m.fs.cuts
}
