package etcdembed

// TempDirForTest exposes the temporary data directory to the tests.
func (s *Server) TempDirForTest() string { return s.tempDir }
