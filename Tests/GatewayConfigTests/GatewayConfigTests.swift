import Testing
@testable import GatewayConfig

@Test func placeholderGatewayConfig() { #expect(Bool(true)) }
