import Testing
@testable import ServiceSupport

@Test func placeholderServiceSupport() { #expect(Bool(true)) }
